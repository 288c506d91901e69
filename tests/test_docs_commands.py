"""Every shell command of README.md and docs/*.md works as written (issue 25).

The commands are extracted from the fenced code blocks (``bash``/``sh``/``console`` blocks, and the
lines of untyped blocks that start with a known program). Each one matches exactly one rule of
:data:`RULES` (first match wins; a command no rule matches fails the test, so a new doc command
must be classified):

- ``run``: an ``inferencegym`` command run as written, in document order, in a sandbox project
  (a temp folder with the repository's config folders linked in, an empty ``data/``, and
  ``../shared/reference`` beside it), with the CLI in-process;
- ``small``: run the same way with the listed argument substitutions (fewer episodes/windows), the
  reason given; the rest of the command is as written;
- ``parse``: too slow, a server, Ray, or needs what CI has not (a GPU, an API key, a trained
  checkpoint): the subcommand path, every flag and every concrete value are validated against the
  click command the CLI builds (a documented flag or subcommand that does not exist fails);
- ``script``: ``python FILE.py``/``python -m MODULE``/``pytest`` lines: the file or module exists and
  each documented flag appears in its source (the scripts are benchmarks: minutes each);
- ``files``: other tools (docker, kubectl, make, ray, chromium, openenv): the repository files the
  line names exist (a Makefile target must exist), and an ``inferencegym`` command after ``--``
  or ``exec SERVICE`` is parse-checked.

Every ``inferencegym`` command is parse-checked, including those that run.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
PROGRAMS = ("inferencegym", "python", ".venv/bin/python", "make", "ray", "docker", "kubectl",
            "uvicorn", "openenv", "chromium", "export", "cat", "pytest")
ENV_ASSIGN = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
SMALL_EVAL = {"--episodes 20": "--episodes 1 --episode-windows 2",
              "--episodes 5": "--episodes 1 --episode-windows 2"}


@dataclass
class DocCommand:
    file: str
    line: int
    text: str
    heredoc: tuple[str, str] | None = None
    """(file name, body) for ``cat > FILE <<'TAG'`` blocks."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


@dataclass(frozen=True)
class Rule:
    pattern: str
    """Regex searched in the command text (environment assignments stripped)."""
    action: str
    reason: str
    subs: dict = field(default_factory=dict)
    """``small``: literal replacements applied to the command before running it."""


RULES: tuple[Rule, ...] = (
    # --- run as written (seconds each) -----------------------------------------------------------
    Rule(r"^inferencegym simulate --model llama-2-7b --gpu a100-80gb --replicas 4 --rate 8 --duration-s 300 --json$",
         "run", "a 300-s simulation: ~1 s"),
    Rule(r"^inferencegym presets$", "run", "prints a table"),
    Rule(r"^inferencegym data (generate|prepare|fit|compare|spikes) ", "run",
         "the shipped fits and the reference traces: seconds"),
    Rule(r"^cat > \S+ <<", "run", "writes the example file the next command reads"),
    # --- run with fewer episodes -----------------------------------------------------------------
    Rule(r"^inferencegym evaluate --policy (?!http|checkpoint:)\S+ --task \S+( --episodes (20|5))?( --seed \d+)?( \[?--json\]?)?$",
         "small", "20 episodes of every task take minutes: 1 episode of 2 windows checks the command",
         {**SMALL_EVAL}),
    # --- parse only --------------------------------------------------------------------------------
    Rule(r"^inferencegym evaluate --policy http://", "parse",
         "needs a running policy endpoint; tests/cli/test_cli_hostile_input.py runs it against a fake one"),
    Rule(r"^inferencegym evaluate --policy checkpoint:", "parse", "needs a trained checkpoint"),
    Rule(r"^inferencegym train ", "parse", "PPO on Ray for minutes"),
    Rule(r"^inferencegym (simulate --control-task|evaluate .*--load-windows) ", "parse",
         "control-plane episodes: a simulated day is ~15 s of CPU (docs/control_plane.md)"),
    Rule(r"^inferencegym (tune|demo|report)\b", "parse", "Ray Tune / PPO / training records: minutes"),
    Rule(r"^inferencegym (serve|server|dashboard)\b", "parse", "a server that runs until Ctrl-C"),
    Rule(r"^inferencegym replay ", "parse", "needs an OpenAI-compatible LLM endpoint"),
    Rule(r"^inferencegym calibrate\b", "parse",
         "refits on the reference data (a minute) or needs a GPU profile measured with CUDA"),
    Rule(r"^inferencegym simulate --model llama-2-7b --gpu a100-80gb --tensor-parallel 1", "parse",
         "the synopsis of every flag (placeholders, alternatives)"),
    # --- scripts and modules -------------------------------------------------------------------------
    Rule(r"^(\.venv/bin/)?python -m inferencegym\.train ", "parse", "the same as inferencegym train"),
    Rule(r"^(\.venv/bin/)?python -m pytest ", "script", "the test files exist (they run in the suite)"),
    Rule(r"^(\.venv/bin/)?python (-m \S+|\S+\.py)", "script",
         "benchmarks, refits and the LLM agent: minutes, or an API key / GPU"),
    Rule(r"^uvicorn \S+:\S+", "script", "a server that runs until Ctrl-C"),
    # --- other tools ---------------------------------------------------------------------------------
    Rule(r"^make (run|test)\b", "files", "the set-up and the whole suite / a training run"),
    Rule(r"^(docker|kubectl|ray|chromium|openenv) ", "files",
         "Docker, Kubernetes, a Ray cluster, a browser or the OpenEnv CLI: not in CI"),
    Rule(r"^export ", "files", "sets environment variables"),
)


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            break
        out.append(ch)
    return "".join(out).rstrip()


def extract(path: Path) -> list[DocCommand]:
    """The shell commands of ``path``'s fenced code blocks, in order."""
    name = path.relative_to(ROOT).as_posix()
    lines = path.read_text().splitlines()
    cmds: list[DocCommand] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang, i = m.group(1).lower(), i + 1
        block: list[tuple[int, str]] = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            block.append((i + 1, lines[i]))
            i += 1
        i += 1
        if lang not in SHELL_LANGS and lang != "":
            continue
        j = 0
        while j < len(block):
            no, raw = block[j]
            text = _strip_comment(raw.strip())
            j += 1
            while text.endswith("\\") and j < len(block):
                text = text[:-1].rstrip() + " " + _strip_comment(block[j][1].strip())
                j += 1
            if lang == "":  # a synopsis: lines starting with -- continue the command above
                while j < len(block) and block[j][1].strip().startswith("--") and text:
                    text += " " + _strip_comment(block[j][1].strip())
                    j += 1
            if not text:
                continue
            words = text.split()
            k = 0
            while k < len(words) and ENV_ASSIGN.match(words[k]):
                k += 1
            if k == len(words) or words[k] not in PROGRAMS:
                continue
            hd = re.match(r"^cat > (\S+) <<'?(\w+)'?$", text)
            if hd:
                body = []
                while j < len(block) and block[j][1].strip() != hd.group(2):
                    body.append(block[j][1])
                    j += 1
                j += 1
                cmds.append(DocCommand(name, no, text, (hd.group(1), "\n".join(body) + "\n")))
                continue
            for part in re.split(r"\s+(?:&&|&|;)\s*", text):
                part = " ".join(w for w in part.split() if not ENV_ASSIGN.match(w)) if \
                    ENV_ASSIGN.match(part.split()[0]) else part
                if part.strip():
                    cmds.append(DocCommand(name, no, " ".join(part.split())))
    return cmds


ALL = [c for p in DOC_FILES for c in extract(p)]


def rule_of(cmd: DocCommand) -> Rule | None:
    return next((r for r in RULES if re.search(r.pattern, cmd.text)), None)


# -- parse-checking an inferencegym command ---------------------------------------------------------

def _placeholder(value: str) -> bool:
    return (value.isupper() or "..." in value or "|" in value or value.startswith("<")
            or re.fullmatch(r"[A-Z][A-Z_]*", value) is not None or "/PPO_" in value)


def check_cli(argv: list[str]) -> list[str]:
    """Problems of ``inferencegym argv`` against the click command tree (empty: fine)."""
    from inferencegym.cli import app

    # typer builds its commands on its own copy of click (typer._click): duck-typed here
    cmd = typer.main.get_command(app)
    ctx = cmd.context_class(cmd)
    path = ["inferencegym"]
    args = [a.strip("[]") for a in argv if a.strip("[]")]
    while hasattr(cmd, "list_commands") and args and not args[0].startswith("-"):
        sub = cmd.get_command(ctx, args[0])
        if sub is None:
            return [f"{' '.join(path)} has no subcommand {args[0]!r}; it has {sorted(cmd.list_commands(ctx))}"]
        path.append(args.pop(0))
        cmd = sub
    if hasattr(cmd, "list_commands"):
        return [f"{' '.join(path)} needs a subcommand"]
    opts: dict = {}
    positional = [p for p in cmd.params if p.param_type_name == "argument"]
    for p in cmd.params:
        if p.param_type_name == "option":
            for o in p.opts + p.secondary_opts:
                opts[o] = p
    problems, n_pos = [], 0
    k = 0
    while k < len(args):
        tok = args[k]
        k += 1
        if tok.startswith("-") and tok != "-":
            names = tok.split("=", 1)[0].split("/")
            for nm in names:
                if nm not in opts:
                    problems.append(f"{' '.join(path)}: no option {nm!r}")
            p = opts.get(names[0])
            if p is None or p.is_flag or len(names) > 1:
                continue
            value = tok.split("=", 1)[1] if "=" in tok else (args[k] if k < len(args) else None)
            if "=" not in tok:
                k += 1
            if value is None:
                problems.append(f"{' '.join(path)}: {tok} needs a value")
            elif not _placeholder(value):
                try:
                    p.process_value(cmd.context_class(cmd), [value] if p.multiple else value)
                except Exception as exc:  # noqa: BLE001 - typer._click.BadParameter
                    msg = exc.format_message() if hasattr(exc, "format_message") else str(exc)
                    problems.append(f"{' '.join(path)}: {tok} {value!r}: {msg}")
        else:
            n_pos += 1
    nargs = sum(max(p.nargs, 1) if p.nargs != -1 else 10**6 for p in positional)
    if n_pos > nargs:
        problems.append(f"{' '.join(path)}: {n_pos} positional arguments, takes {nargs}")
    return problems


def _inner_cli(text: str) -> list[str] | None:
    """The ``inferencegym ...`` argv inside a docker/ray line (after ``--`` or ``exec SERVICE``)."""
    words = shlex.split(text)
    if "inferencegym" in words:
        i = words.index("inferencegym")
        if i > 0:
            return words[i + 1:]
    return None


def _check_files(cmd: DocCommand) -> list[str]:
    problems = []
    words = shlex.split(cmd.text)
    if words[0] == "make":
        targets = re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M)
        problems += [f"Makefile has no target {t!r}" for t in words[1:] if t not in targets]
    for w in words:
        if re.match(r"^(docker|serve|tune|rllib_configs|benchmarks|tests|inferencegym)/\S+\.\w+$", w) \
                and not (ROOT / w).exists():
            problems.append(f"{w} does not exist")
    inner = _inner_cli(cmd.text)
    if inner is not None:
        problems += check_cli(inner)
    return problems


def _check_script(cmd: DocCommand) -> list[str]:
    words = [w.strip("[]") for w in shlex.split(cmd.text) if w.strip("[]")]
    if words[0] == "uvicorn":
        mod, _, attr = words[1].partition(":")
        f = ROOT / (mod.replace(".", "/") + ".py")
        found = f.exists() and (re.search(rf"^{attr}\s*[:=]", f.read_text(), re.M)  # or a lazy one
                                or f'name == "{attr}"' in f.read_text())
        return [] if found else \
            [f"{words[1]}: no module/attribute"]
    words = words[1:]
    if words[:2] == ["-m", "pytest"]:
        return [f"{w} does not exist" for w in words[2:] if w.startswith("tests/") and not (ROOT / w).exists()]
    if words[0] == "-m":
        base = ROOT / words[1].replace(".", "/")
        src = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__main__.py"
        if not src.exists():
            src = base / "__init__.py"
        flags = words[2:]
    else:
        src, flags = ROOT / words[0], words[1:]
    if not src.exists():
        return [f"{src.relative_to(ROOT)} does not exist"]
    text = src.read_text()
    return [f"{src.relative_to(ROOT)} has no option {f!r}" for f in flags
            if f.startswith("--") and f'"{f.split("=")[0]}"' not in text and f"'{f.split('=')[0]}'" not in text]


# -- the tests ------------------------------------------------------------------------------------

def test_the_docs_have_commands_and_every_one_is_classified():
    assert len(ALL) >= 60, len(ALL)
    assert sum(c.text.startswith("inferencegym ") for c in ALL) >= 40
    unclassified = [str(c) for c in ALL if rule_of(c) is None]
    assert not unclassified, "add a rule (run / small / parse ...) for:\n" + "\n".join(unclassified)


def test_every_documented_command_names_real_subcommands_flags_and_files():
    problems = []
    for c in ALL:
        rule = rule_of(c)
        if c.text.startswith("inferencegym "):
            problems += [f"{c}: {p}" for p in check_cli(shlex.split(c.text)[1:])]
        elif rule is not None and rule.action == "script":
            problems += [f"{c}: {p}" for p in _check_script(c)]
        elif rule is not None and rule.action in ("files", "parse") and c.heredoc is None:
            if rule.action == "parse":  # python -m inferencegym.train == inferencegym train
                problems += [f"{c}: {p}" for p in check_cli(["train", *shlex.split(c.text)[3:]])]
            else:
                problems += [f"{c}: {p}" for p in _check_files(c)]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_missing_flag_subcommand_or_bad_value():
    assert check_cli(["evaluate", "--policy", "random", "--no-such-flag"])
    assert check_cli(["nosuchcmd"])
    assert check_cli(["data", "nosuch", "--input", "x"])
    assert check_cli(["evaluate", "--policy", "random", "--episodes", "many"])
    assert not check_cli(["evaluate", "--policy", "random", "--episodes", "20", "[--json]"])
    assert _check_script(DocCommand("x", 1, "python benchmarks/difficulty_table.py --no-such-flag"))


NOT_MODULES = {"inferencegym.pool": "the Parquet metadata key of a pool (workload/pool.py)"}


def test_every_dotted_module_path_in_the_docs_exists():
    """``inferencegym.a.b[.attr]`` in README/docs names a module (or an attribute of one)."""
    bad = []
    for f in DOC_FILES:
        for name in sorted(set(re.findall(r"\binferencegym(?:\.[A-Za-z_]\w*)+", f.read_text()))):
            if name in NOT_MODULES:
                continue
            parts = name.split(".")
            for i in range(len(parts), 0, -1):
                base = ROOT.joinpath(*parts[:i])
                src = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
                if src.exists():
                    rest = parts[i:]
                    if rest and not re.search(rf"\b{rest[0]}\b", src.read_text()):
                        bad.append(f"{f.name}: {name} ({'.'.join(parts[:i])} has no {rest[0]!r})")
                    break
            else:
                bad.append(f"{f.name}: {name} (no such module)")
    assert not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory, reference_dir):
    """A project folder with the repository's config folders, an empty data/, and ../shared."""
    top = tmp_path_factory.mktemp("docs")
    (top / "shared").mkdir()
    (top / "shared" / "reference").symlink_to(reference_dir)
    proj = top / "proj"
    proj.mkdir()
    for d in ("rllib_configs", "tune", "serve", "docker", "benchmarks"):
        (proj / d).symlink_to(ROOT / d)
    (proj / "data").mkdir()
    return proj


RUN_FILES = sorted({c.file for c in ALL if (r := rule_of(c)) is not None and r.action in ("run", "small")})


@pytest.mark.parametrize("doc", RUN_FILES)
def test_the_fast_commands_run_as_written(doc, sandbox, monkeypatch):
    from inferencegym.cli import app

    monkeypatch.chdir(sandbox)
    ran = 0
    for c in ALL:
        rule = rule_of(c)
        if c.file != doc or rule is None or rule.action not in ("run", "small"):
            continue
        if c.heredoc is not None:
            (sandbox / c.heredoc[0]).write_text(c.heredoc[1])
            continue
        text = c.text
        for a, b in rule.subs.items():
            text = text.replace(a, b)
        if rule.action == "small" and "--episode-windows" not in text:
            text += " --episodes 1 --episode-windows 2"
        argv = [a.strip("[]") for a in shlex.split(text)[1:] if a.strip("[]")]
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, f"{c}\n(ran: {text})\n{res.output[-3000:]}\n{res.exception!r}"
        ran += 1
    assert ran >= 1


def test_the_readme_quick_start_data_steps_chain(sandbox):
    """README: generate then prepare then compare (the compare reads what the two wrote)."""
    readme = [c.text for c in ALL if c.file == "README.md" and c.text.startswith("inferencegym data")]
    assert [t.split()[2] for t in readme] == ["generate", "prepare", "compare"], readme
    outputs = {t.split("--output ")[1].split()[0] for t in readme[:2]}
    assert set(readme[2].split()[3:5]) == outputs


if __name__ == "__main__":  # list the commands and what CI does with each
    for c in ALL:
        r = rule_of(c)
        print(f"{r.action if r else 'UNCLASSIFIED':7s} {c}" + (f"   ({r.reason})" if r and r.action != "run" else ""))
    os._exit(0)
