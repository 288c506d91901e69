"""Search the ``phase_rule`` table and detector settings on TRAINING seeds (issue 21).

    python -m inferencegym.evaluation.search_phase_rule --task adversarial_multitenant --seeds 6
    python -m inferencegym.evaluation.search_phase_rule --task bursty_workload --seeds 8

Seeds 0..N-1 (evaluation uses 1000..; never seen here). Coordinate ascent from the clairvoyant's
per-phase table with the default detector settings: each round tries every one-knob change of each
phase's configuration (over ``search_best_static.GRID``) and every value of each detector setting
(``SETTING_GRID``), the rule in the loop (so the table is fitted to the rule's own forecasts, errors
included); stops when a round brings no improvement. Writes ``inferencegym/data/phase_rule.json``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from inferencegym.envs.actions import ServeAction
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.evaluation.search_best_static import (
    DATA_DIR,
    GRID,
    _neighbours,
    _task_grid,
    _write,
    training_seeds,
)
from inferencegym.evaluation.single import run_episode
from inferencegym.policies.baselines import _clairvoyant_table, _data_table, best_static_action
from inferencegym.policies.phase_rule import DEFAULT_SETTINGS, PhaseRulePolicy
from inferencegym.tasks.spec import get_task

RULE_PHASES: dict[str, tuple[str, ...]] = {"sinusoidal": ("low", "high", "low+mega", "high+mega"),
                                           "onoff": ("off", "on")}
"""Phase names the rule forecasts per arrival process (its table's keys)."""
SETTING_GRID: dict[str, dict[str, tuple[float, ...]]] = {
    "sinusoidal": {"lead_windows": (-1.0, -0.5, 0.0, 0.5, 1.0, 2.0),
                   "threshold_shift": (-0.3, -0.15, 0.0, 0.15, 0.3),
                   "mega_hold_windows": (0.0, 1.0, 2.0, 4.0)},
    "onoff": {"on_threshold": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)},
}
"""Candidate values of the detector settings per arrival process."""


def search_phase_rule(task_id: str, seeds: list[int], rounds: int = 3, log=print) -> dict:
    """Coordinate ascent over the per-phase table and the detector settings (module docstring)."""
    task = get_task(task_id)
    process = task.workload.process
    if process not in RULE_PHASES:
        raise ValueError(f"phase_rule has no phases to search on {task_id!r} (process {process!r}); "
                         f"tasks with phases: sinusoidal or onoff workloads")
    default = best_static_action(task_id)
    start = _clairvoyant_table().get("tasks", {}).get(task_id, {}).get("phases", {})
    table = {p: ServeAction(**start[p]) if p in start else
             (ServeAction(**start[p.split("+")[0]]) if p.split("+")[0] in start else default)
             for p in RULE_PHASES[process]}
    settings = dict(DEFAULT_SETTINGS)
    env = LLMServeEnv(task_id)
    grid = _task_grid(task_id, GRID)
    cache: dict[tuple, float] = {}

    def score(tab: dict[str, ServeAction], st: dict[str, float]) -> float:
        key = (tuple(sorted((k, v.model_dump_json()) for k, v in tab.items())), tuple(sorted(st.items())))
        if key not in cache:
            pol = PhaseRulePolicy(task_id, table=tab, settings=st)
            cache[key] = float(np.mean([run_episode(env, pol, s).score for s in seeds]))
        return cache[key]

    best = score(table, settings)
    log(f"{task_id}: start {best:.4f}")
    for r in range(rounds):
        improved = False
        for name, values in SETTING_GRID[process].items():
            for v in values:
                st = {**settings, name: v}
                s = score(table, st)
                if s > best + 1e-9:
                    settings, best, improved = st, s, True
                    log(f"  round {r}: {name}={v} -> {best:.4f}")
        for p in RULE_PHASES[process]:
            for a in _neighbours(table[p], grid):
                tab = {**table, p: a}
                s = score(tab, settings)
                if s > best + 1e-9:
                    table, best, improved = tab, s, True
                    log(f"  round {r}: {p} -> {a.model_dump()} -> {best:.4f}")
        if not improved:
            break
    return {"phases": {k: v.model_dump() for k, v in table.items()}, "settings": settings,
            "train_score": best, "train_seeds": seeds, "evaluated": len(cache)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--seeds", type=int, default=6, help="training seeds 0..N-1 (< 1000)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    seeds = training_seeds(args.seeds)
    t0 = time.time()
    entry = search_phase_rule(args.task, seeds, rounds=args.rounds)
    entry["search_wall_s"] = round(time.time() - t0, 1)
    _write(DATA_DIR / "phase_rule.json", args.task, entry,
           "phase_rule per-phase configurations and detector settings: coordinate ascent from the "
           "clairvoyant table with the rule in the loop, on training seeds")
    _data_table.cache_clear()
    print(f"{args.task}: train score {entry['train_score']:.4f} on seeds 0..{args.seeds - 1} "
          f"({entry['evaluated']} evaluated, {entry['search_wall_s']} s)")


if __name__ == "__main__":
    main()
