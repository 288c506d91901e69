"""The README's result tables quote the run records (issue 25, item 16: the training table had
drifted from docs/bench/training.md and benchmarks/results/training/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "results" / "training"


def _table_after(heading: str) -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    rest = text[text.index(heading):]
    rows = []
    for line in rest.splitlines()[1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # header and rule


def _rows(task: str) -> dict[str, dict]:
    return _single(task) or {r["policy"]: r for r in json.loads((RECORDS / f"{task}.json").read_text())["rows"]}


SINGLE = ROOT / "benchmarks" / "results" / "issue21" / "difficulty_ppo.json"
"""The single-agent difficulty record (issue 21): the README's command with ``--json-out`` this file;
its ``ppo`` rows are the shipped modules, re-exported from issue 21's runs."""


def _single(task: str) -> dict[str, dict]:
    return {r["policy"]: r for r in json.loads(SINGLE.read_text()) if r["task"] == task}


def _returned(task: str) -> dict:
    single = _single(task)
    if single:
        return single["ppo"]
    return json.loads((RECORDS / f"{task}.json").read_text())["rows"][0]


def test_the_training_table_quotes_the_returned_policy_of_each_record():
    rows = _table_after("**Training** (PPO")
    assert len(rows) >= 8
    for task, _returned_policy, grade, refs, _outcome in rows:
        rec = _returned(task)
        m = re.match(r"([0-9.]+) ± ([0-9.]+)", grade)
        assert m, grade
        assert float(m.group(1)) == pytest.approx(rec["score_mean"], abs=5e-4), task
        assert float(m.group(2)) == pytest.approx(rec["score_ci95"], abs=5e-4), task
        p99 = re.search(r"\(([0-9.]+) s\)", grade)
        if p99:
            assert float(p99.group(1)) == pytest.approx(rec["ttft_p99_s"], abs=5e-3), task
        by_name = _rows(task)
        for name, value in re.findall(r"\b([a-z_]+) ([0-9]\.[0-9]{3})\b", refs):
            if name in by_name:
                assert float(value) == pytest.approx(by_name[name]["score_mean"], abs=5e-4), (task, name)


def test_the_difficulty_table_quotes_the_baseline_rows_of_the_records():
    rows = _table_after("**Difficulty of the single-agent tasks**")
    text = (ROOT / "README.md").read_text()
    header = next(ln for ln in text[text.index("**Difficulty of the single-agent tasks**"):].splitlines()
                  if ln.startswith("| task |"))
    names = [c.strip().split(" ")[0] for c in header.strip("|").split("|")[1:]]
    names = ["ppo" if n == "PPO" else n for n in names]
    assert {"random", "static_default", "heuristic", "best_static", "phase_rule", "ppo", "clairvoyant"} <= set(names)
    assert [r[0] for r in rows] == ["static_workload", "bursty_workload", "adversarial_multitenant"]
    for task, *cells in rows:
        rec = _rows(task)
        assert len(cells) == len(names), (task, cells)
        for name, cell in zip(names, cells):
            mean, ci = (float(x) for x in cell.split(" ± "))
            assert mean == pytest.approx(rec[name]["score_mean"], abs=5e-4), (task, name)
            assert ci == pytest.approx(rec[name]["score_ci95"], abs=5e-4), (task, name)
