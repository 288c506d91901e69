"""Issue 17, defect 7: the command line answers bad input with one error line (exit 2), never a
traceback, never a half-written or replaced file, and never a silently created folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from inferencegym.cli import app

BURSTGPT = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _row(t, out=10):
    return f"{t},ChatGPT,10,{out},{10 + out},Conversation log\n"


def run(*args: str):
    res = CliRunner().invoke(app, list(args))
    return res, res.output


def _assert_user_error(res, out, needle: str | None = None):
    assert res.exit_code == 2, (res.exit_code, out, res.exception)
    assert "Traceback" not in out
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    if needle:
        assert needle in " ".join(out.split()), out


@pytest.fixture()
def files(tmp_path: Path):
    d = tmp_path
    (d / "random.bin").write_bytes(bytes(range(256)) * 20)
    junk = d / "junk_ckpt"
    junk.mkdir()
    (junk / "class_and_ctor_args.pkl").write_bytes(b"\xdc\x00garbage" * 10)
    (d / "rate_list.yaml").write_text("rate: [1, 2]\n")
    (d / "inf.yaml").write_text("duration_s: .inf\n")
    (d / "py.yaml").write_text('rate: !!python/object/apply:os.system ["echo pwned"]\n')
    (d / "broken.yaml").write_text("rate: [1\n  bad: :\n")
    (d / "huge.yaml").write_text("replicas: 100000000\n")
    (d / "ok.csv").write_text(BURSTGPT + "".join(_row(i) for i in range(50)))
    (d / "onerow.csv").write_text(BURSTGPT + _row(0))
    (d / "allfailed.csv").write_text(BURSTGPT + _row(0, 0) + _row(1, 0))
    (d / "equal.csv").write_text(BURSTGPT + _row(5) + _row(5) + _row(5))
    (d / "huge_ts.csv").write_text(BURSTGPT + _row(0) + _row("1e300"))
    (d / "folder").mkdir()
    return d


def test_checkpoints_that_are_not_checkpoints(files):
    for spec in ("checkpoint:/nonexistent", f"checkpoint:{files / 'random.bin'}",
                 f"checkpoint:{files / 'junk_ckpt'}"):
        res, out = run("evaluate", "--policy", spec, "--task", "static_workload", "--episodes", "1")
        _assert_user_error(res, out)
        res, out = run("serve", "--policy", spec, "--port", "1")
        _assert_user_error(res, out)
        assert "\n" not in out.strip()  # one line


@pytest.mark.parametrize("name,needle", [
    ("rate_list.yaml", "rate"), ("inf.yaml", "finite"), ("py.yaml", "not valid YAML"),
    ("broken.yaml", "not valid YAML"), ("huge.yaml", "replicas"),
])
def test_bad_simulate_configs_fail_fast_with_the_reason(files, name, needle):
    res, out = run("simulate", "--config", str(files / name), "--json")
    _assert_user_error(res, out, needle)


def test_simulate_missing_trace_and_bad_outputs(files):
    _assert_user_error(*run("simulate", "--trace", "/nonexistent", "--json"), "not found")
    trace = files / "ok.csv"
    before = trace.read_bytes()
    _assert_user_error(*run("simulate", "--trace", str(trace), "--results-parquet", str(trace), "--json"),
                       "replace the input")
    assert trace.read_bytes() == before
    _assert_user_error(*run("simulate", "--duration-s", "5", "--results-parquet", str(files / "folder"),
                            "--json"), "is a folder")
    _assert_user_error(*run("simulate", "--duration-s", "5", "--results-parquet",
                            str(files / "no" / "such" / "r.parquet"), "--json"), "mkdir -p")
    assert not (files / "no").exists()  # never created silently
    _assert_user_error(*run("simulate", "--rate", "100000", "--duration-s", "1e6", "--json"), "requests")
    # replay checks its output before sending anything (port 9: nothing listens)
    _assert_user_error(*run("replay", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--task",
                            "static_workload", "--output", str(files / "no" / "r.parquet")), "mkdir -p")


@pytest.mark.parametrize("name,ok", [("onerow.csv", True), ("equal.csv", True),
                                     ("allfailed.csv", False), ("huge_ts.csv", False)])
def test_data_prepare_edge_traces_fail_clean_or_succeed(files, name, ok):
    out_path = files / f"{name}.parquet"
    res, out = run("data", "prepare", "-i", str(files / name), "-o", str(out_path))
    if ok:
        assert res.exit_code == 0, (out, res.exception)
        assert out_path.is_file() and "requests" in out
    else:
        _assert_user_error(res, out)
        assert not out_path.exists()
        assert not list(files.glob(".*partial*"))  # nothing half-written left behind


def test_data_outputs_and_ranges(files):
    trace = files / "ok.csv"
    before = trace.read_bytes()
    _assert_user_error(*run("data", "fit", "-i", str(trace), "-o", str(trace)), "replace the input")
    assert trace.read_bytes() == before
    _assert_user_error(*run("data", "prepare", "-i", str(trace), "-o", str(files / "folder")), "folder")
    _assert_user_error(*run("data", "prepare", "-i", str(trace), "-o", str(files / "nope" / "p.parquet")),
                       "create it first")
    assert not (files / "nope").exists()
    _assert_user_error(*run("data", "spikes", str(trace), "--bin-s", "1e-9"), "--bin-s")
    _assert_user_error(*run("data", "fit", "-i", str(trace), "-o", str(files / "f.json"), "--bin-s", "1e-9"),
                       "--bin-s")


def test_train_unknown_task_fails_before_ray_starts(files, tmp_path):
    import ray

    src = Path(__file__).resolve().parents[2] / "rllib_configs" / "static_workload.yaml"
    bad = tmp_path / "bad_task.yaml"
    bad.write_text(src.read_text().replace("task_id: static_workload", "task_id: no_such_task"))
    was = ray.is_initialized()
    res, out = run("train", "--config", str(bad), "--iterations", "1", "--no-mlflow")
    _assert_user_error(res, out, "unknown task")
    assert ray.is_initialized() == was
    _assert_user_error(*run("train", "--config", str(files / "py.yaml"), "--no-mlflow"))
