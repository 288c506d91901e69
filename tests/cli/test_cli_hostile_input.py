"""Issue 25, items 6-10 and 12: the command line under hostile or careless input, and its output.

- trace files: a deeply nested JSONL line, integers past int64, token counts and timestamps no
  trace can hold, bytes that are not UTF-8 -> one line naming the file, row and column (item 6);
- every YAML the project reads goes through one loader that refuses the "billion laughs", recursive
  aliases, deep nesting and oversized files, fast (item 7);
- every float option of every command refuses NaN and infinity (item 8);
- ``evaluate --policy http://...`` works from the CLI (item 9);
- ``pretrained:nosuchtask`` lists the pretrained tasks; a malformed sweep fails before Ray and
  MLflow are imported, in one line (item 10);
- ``evaluate`` prints a line per finished (policy, task) on stderr, tables are never cut to 80
  columns, and training summaries never print ``nan`` (item 12).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from inferencegym.cli import app
from inferencegym.cli.errors import float_options
from inferencegym.safe_yaml import MAX_YAML_NODES, YamlInputError, load_yaml, read_yaml

ROOT = Path(__file__).resolve().parents[2]
BURSTGPT = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
GOOD = {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}


def run(*args: str):
    res = CliRunner().invoke(app, list(args))
    return res, " ".join(res.output.split())


def assert_one_line_error(res, needles: tuple[str, ...] = ()):
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    err_lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(err_lines) == 1, res.output
    for n in needles:
        assert n in err_lines[0], (n, err_lines[0])


# -- item 6: trace loaders --------------------------------------------------------------------------

def _jsonl(tmp_path: Path, name: str, second: str) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(GOOD) + "\n" + second + "\n")
    return p


@pytest.mark.parametrize("second, needle", [
    ('{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": ' + "[" * 200_000 + "]" * 200_000 + "}",
     "row 2 (line 2): JSON nested deeper than 64 levels"),
    ("[" * 200_000 + "]" * 200_000, "row 2 (line 2): JSON nested deeper than 64 levels"),
    ('{"timestamp": 1, "input_length": 99999999999999999999999, "output_length": 5, "hash_ids": [1]}',
     "row 2 (line 2), field 'input_length': expected an integer"),
    ('{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": [99999999999999999999999]}',
     "row 2 (line 2), field 'hash_ids'"),
    ('{"timestamp": 1, "input_length": 9000000000000000000, "output_length": 5, "hash_ids": [1]}',
     "row 2 (line 2), field 'input_length': expected a token count <= 100,000,000"),
    ('{"timestamp": 1e300, "input_length": 10, "output_length": 5, "hash_ids": [1]}',
     "row 2 (line 2), field 'timestamp'"),
    ('{"timestamp": 1' + "0" * 400 + ', "input_length": 10, "output_length": 5, "hash_ids": [1]}',
     "row 2 (line 2), field 'timestamp': expected a finite number"),
])
def test_hostile_jsonl_rows_fail_in_one_line_naming_file_and_row(tmp_path, second, needle):
    p = _jsonl(tmp_path, "t.jsonl", second)
    out = tmp_path / "o.parquet"
    res, _ = run("data", "prepare", "--input", str(p), "--output", str(out))
    assert_one_line_error(res, (str(p), needle))
    assert not out.exists() and not list(tmp_path.glob(".*partial*"))
    res, _ = run("data", "compare", str(p), str(p))
    assert_one_line_error(res, (str(p), needle))


def test_a_deeply_nested_first_line_and_non_utf8_bytes(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    res, _ = run("data", "compare", str(deep), str(deep))
    assert_one_line_error(res, (str(deep), "line 1", "nested deeper"))
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe{}\n")
    res, _ = run("data", "compare", str(binary), str(binary))
    assert_one_line_error(res, (str(binary), "not UTF-8"))


@pytest.mark.parametrize("row, needle", [
    ("1,ChatGPT,99999999999999999999999,5,15,Conversation log", "row 2 (line 3), column 'Request tokens': expected an integer"),
    ("1,ChatGPT,1e18,5,15,Conversation log", "row 2 (line 3), column 'Request tokens': expected an integer"),
    ("1,ChatGPT,9000000000000000000,5,15,Conversation log", "row 2 (line 3), column 'Request tokens': token counts must be <= 100,000,000"),
    ("1e300,ChatGPT,10,5,15,Conversation log", "row 2 (line 3), column 'Timestamp'"),
    ("nan,ChatGPT,10,5,15,Conversation log", "row 2 (line 3), column 'Timestamp': empty or NaN"),
])
def test_hostile_csv_rows_fail_naming_row_and_column(tmp_path, row, needle):
    p = tmp_path / "t.csv"
    p.write_text(BURSTGPT + "0,ChatGPT,10,5,15,Conversation log\n" + row + "\n")
    out = tmp_path / "o.parquet"
    res, _ = run("data", "prepare", "--input", str(p), "--output", str(out))
    assert_one_line_error(res, (str(p), needle))
    assert not out.exists()


def test_hostile_fit_files_and_pools_fail_in_one_line_naming_the_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    for f, needle in ((deep, "nested deeper than 64"), (listed, "not a workload fit")):
        res, _ = run("data", "generate", "--fit", str(f), "--duration-s", "10", "--output",
                     str(tmp_path / "g.parquet"))
        assert_one_line_error(res, (str(f), needle))
    for name, cols, needle in (
            ("nan.parquet", {"arrival_s": [0.0, float("nan")], "prompt_tokens": [1, 2], "output_tokens": [1, 1]},
             "row 2, column 'arrival_s': expected a finite time"),
            ("neg.parquet", {"arrival_s": [0.0, 1.0], "prompt_tokens": [1, 2], "output_tokens": [1, -5]},
             "row 2, column 'output_tokens': expected a whole token count"),
            ("huge.parquet", {"arrival_s": [0.0, 1.0], "prompt_tokens": [1, 2**62], "output_tokens": [1, 1]},
             "row 2, column 'prompt_tokens'"),
            ("text.parquet", {"arrival_s": ["0", "1"], "prompt_tokens": [1, 2], "output_tokens": [1, 1]},
             "column 'arrival_s' holds string")):
        pool = tmp_path / name
        pq.write_table(pa.table(cols), pool)
        res, _ = run("data", "compare", str(pool), str(pool))
        assert_one_line_error(res, (str(pool), needle))


# -- item 7: one safe YAML loader -------------------------------------------------------------------

def _laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, c in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{c}: &{c} [" + ",".join(["*" + prev] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_the_loader_refuses_expansion_recursion_depth_and_size_and_reads_the_shipped_files():
    import yaml

    t0 = time.perf_counter()
    with pytest.raises(YamlInputError, match=f"more than {MAX_YAML_NODES:,} values"):
        load_yaml(_laughs(), "laughs.yaml")
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(YamlInputError, match="recursive alias"):
        load_yaml("a: &a [1, *a]\n")
    with pytest.raises(YamlInputError, match="nested deeper than 64"):
        load_yaml("x: " + "[" * 100 + "]" * 100)
    with pytest.raises(YamlInputError, match="at most"):
        load_yaml("x: " + "a" * (2 << 20))
    with pytest.raises(YamlInputError, match="python tags are refused"):
        load_yaml('x: !!python/object/apply:os.system ["echo pwned"]')
    # small aliases are fine; the shipped files load exactly as yaml.safe_load reads them
    assert load_yaml("a: &a [1, 2]\nb: *a\n") == {"a": [1, 2], "b": [1, 2]}
    for p in sorted((ROOT / "rllib_configs").glob("*.yaml")) + sorted((ROOT / "tune").glob("*.yaml")):
        assert read_yaml(p) == yaml.safe_load(p.read_text()), p


@pytest.mark.parametrize("argv", [
    ("train", "--config", "{f}"),
    ("train", "--config", str(ROOT / "rllib_configs/static_workload.yaml"), "--set", "ppo.lr={laughs}"),
    ("simulate", "--config", "{f}"),
    ("data", "generate", "--tenants", "{f}", "--output", "{o}"),
])
def test_every_yaml_the_cli_reads_refuses_the_billion_laughs_fast(tmp_path, argv):
    f = tmp_path / "laughs.yaml"
    f.write_text(_laughs())
    args = [a.format(f=f, o=tmp_path / "o.parquet", laughs=_laughs().replace("\n", "\n")) for a in argv]
    t0 = time.perf_counter()
    res, out = run(*args)
    assert time.perf_counter() - t0 < 20.0
    assert_one_line_error(res, ("expands to more than",))
    assert len(out) < 600


def test_training_config_errors_echo_bounded_values(tmp_path):
    res, out = run("train", "--config", str(ROOT / "rllib_configs/static_workload.yaml"),
                   "--set", "ppo.lr=" + "x" * 5000)
    assert_one_line_error(res, ("ppo.lr",))
    assert "x" * 100 not in out and len(out) < 700, out


# -- item 10 (sweep half): a malformed sweep fails before Ray / MLflow, in one line -------------------

def test_a_malformed_sweep_fails_fast_without_importing_ray_or_mlflow(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text("name: x\nbase_config: [1\n")
    code = ("import sys\nfrom inferencegym.cli import app\n"
            f"sys.argv = ['inferencegym', 'tune', '--sweep', {str(f)!r}]\n"
            "try:\n    app()\nexcept SystemExit as e:\n"
            "    print('EXIT', e.code, 'ray' in sys.modules, 'mlflow' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert "EXIT 2 False False" in p.stdout, (p.stdout, p.stderr[-2000:])
    errs = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(errs) == 1 and errs[0].startswith("error: sweep file") and "not valid YAML" in errs[0], errs


def test_pretrained_nosuchtask_lists_the_pretrained_tasks():
    res, out = run("evaluate", "--policy", "pretrained:nosuchtask", "--task", "static_workload",
                   "--episodes", "1")
    assert_one_line_error(res, ("no pretrained policy for task 'nosuchtask'", "; available:",
                                "static_workload", "cluster_routing"))
    res, out = run("evaluate", "--policy", "pretrained:static_workload", "--task", "bursty_workload",
                   "--episodes", "1")
    assert_one_line_error(res, ("use --task static_workload or pretrained:bursty_workload",))


# -- item 8: NaN / inf in float options ------------------------------------------------------------

def _commands(a: typer.Typer, prefix: str = ""):
    for info in a.registered_commands:
        yield (prefix + (info.name or info.callback.__name__)), info.callback
    for g in a.registered_groups:
        yield from _commands(g.typer_instance, prefix + g.name + " ")


def test_every_float_option_of_every_command_refuses_nan_and_inf():
    checked = 0
    for name, cb in _commands(app):
        for param, flag in float_options(cb).items():
            for bad in (math.nan, math.inf, -math.inf):
                with pytest.raises(typer.Exit) as exc:
                    cb(**{param: bad})  # the validator runs before the command's body
                assert exc.value.exit_code == 2, (name, flag)
                checked += 1
    assert checked >= 3 * 20  # data, simulate, calibrate, replay, serve, server, demo ... all covered


def test_data_generate_jitter_nan_fails_and_writes_nothing(tmp_path):
    out = tmp_path / "g.parquet"
    res, _ = run("data", "generate", "--jitter-s", "nan", "--duration-s", "10", "--output", str(out))
    assert_one_line_error(res, ("--jitter-s must be a finite number, got nan",))
    assert not out.exists()
    res, _ = run("simulate", "--rate", "inf")
    assert_one_line_error(res, ("--rate must be a finite number, got inf",))


# -- item 9: evaluate --policy http://... -----------------------------------------------------------

class _FakeEndpoint(BaseHTTPRequestHandler):
    """The /metadata + /act contract of `inferencegym serve`: always the flat action 0."""

    calls = 0

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._send({"task_id": "static_workload", "policy_version": "fake-1"})

    def do_POST(self):  # noqa: N802
        from inferencegym.envs.actions import FLAT_NVEC

        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert "observation" in body
        type(self).calls += 1
        self._send({"action": [0] * len(FLAT_NVEC)})

    def log_message(self, *args):
        pass


def test_evaluate_talks_to_an_http_policy_endpoint():
    from inferencegym.envs.actions import FLAT_NVEC, flat_to_action
    from inferencegym.evaluation.single import evaluate_policy

    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        # a fresh process: nothing else has imported the endpoint package (which registers http://)
        p = subprocess.run([sys.executable, "-m", "inferencegym.cli", "evaluate", "--policy", url,
                            "--task", "static_workload", "--episodes", "2", "--episode-windows", "3",
                            "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    finally:
        server.shutdown()
    assert p.returncode == 0, p.stderr[-3000:]
    (row,) = json.loads(p.stdout)
    assert row["policy"] == url and row["task"] == "static_workload"
    assert _FakeEndpoint.calls == 2 * 3

    class Zero:
        def act(self, obs, info=None):
            return flat_to_action([0] * len(FLAT_NVEC))

    local = evaluate_policy(Zero(), "static_workload", episodes=2, seed=1000, episode_windows=3)
    assert row["score_mean"] == pytest.approx(local.to_json_dict()["score_mean"], abs=1e-12)


# -- item 12: partial results, uncut tables, no nan --------------------------------------------------

def test_evaluate_prints_each_finished_run_on_stderr_and_an_uncut_table():
    res = CliRunner().invoke(app, ["evaluate", "--policy", "random,static_default", "--task",
                                   "static_workload,bursty_workload", "--episodes", "1",
                                   "--episode-windows", "2"])
    assert res.exit_code == 0, res.output
    partial = [ln for ln in res.stderr.splitlines() if ln.startswith("[")]
    assert [ln.split()[0] for ln in partial] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"], res.stderr
    assert "static_workload random: score" in partial[0]
    table = res.stdout.splitlines()
    assert any("$ / 1k tok" in ln for ln in table), res.stdout  # the last header is not cut
    assert not any("…" in ln for ln in table), res.stdout
    assert max(len(ln) for ln in table) > 80  # wider than the 80 columns rich assumes for a pipe


def test_training_summary_never_prints_nan():
    from inferencegym.cli.train import format_summary

    s = format_summary({"training_iteration": 3.0, "env_steps": 4000.0, "time_total_s": 12.0,
                        "episode_return_mean": math.nan, "grade/score": math.nan})
    assert "nan" not in s.lower().replace("n/a", "")
    assert "return n/a (not measured" in s and "grade n/a (not measured" in s
    s = format_summary({"episode_return_mean": -1.25, "grade/score": 0.8})
    assert "return -1.25" in s and "grade 0.800" in s


def test_training_summary_reports_the_last_measured_value_from_the_trial_results(tmp_path):
    """The value comes from the trial's result.json: the last iteration in which an episode ended."""
    from inferencegym.cli.train import format_summary, last_measured

    lines = [{"training_iteration": 1, "env_runners": {"episode_return_mean": -3.5, "grade/score": 0.61}},
             {"training_iteration": 2, "env_runners": {"episode_return_mean": -2.0, "grade/score": 0.7}},
             {"training_iteration": 3, "env_runners": {"episode_return_mean": float("nan")}}]
    (tmp_path / "result.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    earlier = last_measured(tmp_path)
    assert earlier == {"episode_return_mean": (-2.0, 2), "grade/score": (0.7, 2)}
    s = format_summary({"training_iteration": 3.0, "episode_return_mean": math.nan}, earlier)
    assert "return -2 (iteration 2; no episode ended in the last one)" in s
    assert "grade 0.700 (iteration 2" in s and "nan" not in s.replace("n/a", "")
    assert last_measured(tmp_path / "missing") == {}


def test_rich_markup_in_what_the_user_gives_is_printed_not_interpreted(tmp_path):
    res, out = run("evaluate", "--policy", "[/x]", "--task", "static_workload", "--episodes", "1")
    assert_one_line_error(res, ("unknown policy '[/x]'",))
    res, out = run("data", "prepare", "--input", str(tmp_path / "[/bold]x.csv"), "--output",
                   str(tmp_path / "o.parquet"))
    assert_one_line_error(res, ("[/bold]x.csv",))
    res, out = run("data", "generate", "--duration-s", "30", "--output", str(tmp_path / "[red]g.parquet"))
    assert res.exit_code == 0, res.output
    res, out = run("data", "compare", str(tmp_path / "[red]g.parquet"), str(tmp_path / "[red]g.parquet"))
    assert res.exit_code == 0, (res.output, res.exception)
    assert "A: [red]g.parquet" in res.output


@pytest.mark.parametrize("args, needle", [
    (("--fit", "mooncake_agent", "--rate", "1e9"), "--rate must be in (0, 100000] req/s"),
    (("--rate", "1000", "--duration-s", "1e7"), "at most 5,000,000 are generated"),
    (("--jitter-s", "-1"), "--jitter-s must be in [0,"),
    (("--mega-prompt-tokens", "-5"), "--mega-prompt-tokens must be in [0, 100,000,000]"),
    (("--mega-prompt-tokens", "10", "--mega-every-s", "1e-300"), "--mega-every-s must be >= 0.001 s"),
])
def test_data_generate_sizes_are_checked_before_drawing(tmp_path, args, needle):
    out = tmp_path / "g.parquet"
    res, _ = run("data", "generate", *args, "--output", str(out))
    assert_one_line_error(res, (needle,))
    assert not out.exists()


def test_spikes_local_window_is_bounded(tmp_path):
    out = tmp_path / "g.parquet"
    assert run("data", "generate", "--duration-s", "600", "--output", str(out))[0].exit_code == 0
    for bad in ("-5", "1e300"):
        res, _ = run("data", "spikes", str(out), "--local-window-s", bad)
        assert_one_line_error(res, ("--local-window-s must be in [--bin-s = 10,",))


@pytest.mark.parametrize("value, needle", [(".nan", "ppo.lr must be a finite number"),
                                           ("[[0, .inf]]", "ppo.lr.0.1 must be a finite number"),
                                           ("nan", "ppo.lr")])
def test_train_refuses_nan_and_inf_from_set_before_ray_starts(value, needle):
    t0 = time.perf_counter()
    res, _ = run("train", "--config", str(ROOT / "rllib_configs/static_workload.yaml"), "--set", f"ppo.lr={value}")
    assert_one_line_error(res, (needle,))
    assert time.perf_counter() - t0 < 20.0


def test_evaluate_with_an_unreachable_endpoint_or_no_task_fails_in_one_line():
    res, _ = run("evaluate", "--policy", "http://127.0.0.1:1", "--task", "static_workload", "--episodes", "1")
    assert_one_line_error(res, ("cannot reach policy endpoint http://127.0.0.1:1",))
    res, _ = run("evaluate", "--policy", "random", "--task", ",", "--episodes", "1")
    assert_one_line_error(res, ("give at least one --task",))


def test_train_refuses_a_negative_seed_before_ray_starts():
    t0 = time.perf_counter()
    res, _ = run("train", "--config", str(ROOT / "rllib_configs/static_workload.yaml"), "--set", "seed=-1")
    assert_one_line_error(res, ("seed: Input should be greater than or equal to 0",))
    assert time.perf_counter() - t0 < 20.0
