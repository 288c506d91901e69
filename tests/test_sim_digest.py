"""Behaviour digest: seeded results of every task (single agent and cluster, prefix tasks included)
and of several simulator scenarios hash to the recorded values (``tests/sim_digest.json``).

A refactor keeps them bit-identical; a change that moves behaviour on purpose re-records them with
``PYTHONPATH=$PWD .venv/bin/python benchmarks/sim_digest.py --write`` and names the moved entries
in its commit message.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "sim_digest.py"
_spec = importlib.util.spec_from_file_location("sim_digest", _PATH)
sim_digest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim_digest)

RECORD = json.loads(sim_digest.RECORD.read_text())


@pytest.mark.parametrize("kind", ["single", "cluster", "simulate"])
def test_seeded_results_match_the_recorded_digest(kind):
    got = sim_digest.compute(only=f"{kind}/")
    assert got, f"no {kind} entries computed"
    moved = {k: (v, RECORD.get(k)) for k, v in got.items() if RECORD.get(k) != v}
    assert not moved, (f"{len(moved)} {kind} result(s) moved (got, recorded): {moved}; if on purpose, "
                       f"re-record with benchmarks/sim_digest.py --write and say which moved")


def test_the_record_covers_every_task_and_scenario():
    from inferencegym.tasks import list_tasks

    for t in list_tasks():
        assert any(k.startswith(f"{t.kind}/{t.task_id}/") for k in RECORD), t.task_id
    for name in sim_digest._scenarios():
        assert f"simulate/{name}" in RECORD
