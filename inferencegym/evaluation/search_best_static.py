"""Find the ``best_static`` configuration (and the clairvoyant per-phase table) on TRAINING seeds.

    python -m inferencegym.evaluation.search_best_static                  # all single-agent tasks
    python -m inferencegym.evaluation.search_best_static --task bursty_workload --seeds 4
    python -m inferencegym.evaluation.search_best_static --clairvoyant     # per-phase table too

Training seeds are 0..N-1; evaluation uses seeds from 1000 on (``DEFAULT_EVAL_SEED``), so the
search never sees an evaluation episode. ``best_static`` = the best configuration found by
coordinate ascent over ``GRID`` from vLLM's defaults and (with ``--clairvoyant``) from each of the
clairvoyant's per-phase configurations (mean grade on the training seeds). The clairvoyant table starts every phase at the best static configuration and then
does coordinate ascent per phase (one phase's configuration varies, the others stay) over
``CLAIRVOYANT_GRID``, on the same training seeds. Results go to ``inferencegym/data/best_static.json`` and
``inferencegym/data/clairvoyant.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from inferencegym.envs.actions import ServeAction
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.evaluation.single import run_episode
from inferencegym.policies.baselines import VLLM_DEFAULT, _best_static_table
from inferencegym.tasks.episode_workload import PHASE_NAMES
from inferencegym.tasks.spec import get_task, list_tasks

DATA_DIR = Path(__file__).resolve().parents[1] / "data"

GRID: dict[str, tuple] = {
    "batch_cap": (32, 64, 256),
    "kv_budget_fraction": (0.15, 0.5, 0.9),
    "speculation_depth": (0, 2),
    "quantization_tier": ("FP16", "INT8"),
    "prefill_decode_split": (False, True),
    "priority_routing": (False, True),
}
"""Values the best_static coordinate ascent may set per knob (priority only on tasks with a
priority tenant)."""

CLAIRVOYANT_GRID: dict[str, tuple] = {
    "batch_cap": (32, 256),
    "kv_budget_fraction": (0.15, 0.5, 0.9),
    "speculation_depth": (0,),
    "quantization_tier": ("FP16", "INT8"),
    "prefill_decode_split": (False, True),
    "priority_routing": (False, True),
}
"""Candidates per phase of the clairvoyant coordinate ascent (smaller: it runs once per phase)."""


def grid_actions(task_id: str, grid: dict[str, tuple] | None = None) -> list[ServeAction]:
    task = get_task(task_id)
    grid = dict(GRID if grid is None else grid)
    if not any(t.priority == 1 for t in task.tenants):
        grid["priority_routing"] = (False,)
    keys = list(grid)
    return [ServeAction(**dict(zip(keys, vals))) for vals in itertools.product(*grid.values())]


class _PhasePolicy:
    privileged = True  # reads info["oracle/phase_name"]: needs LLMServeEnv(privileged=True)

    def __init__(self, table: dict[str, ServeAction], default: ServeAction):
        self.table, self.default = table, default

    def act(self, obs, info=None):
        return self.table.get(info["oracle/phase_name"], self.default)


def _mean_score(env: LLMServeEnv, policy: Any, seeds: list[int]) -> float:
    return float(np.mean([run_episode(env, policy, s).score for s in seeds]))


class _Static:
    def __init__(self, a: ServeAction):
        self.a = a

    def act(self, obs, info=None):
        return self.a


def _neighbours(a: ServeAction, grid: dict[str, tuple]) -> list[ServeAction]:
    """Every configuration that differs from ``a`` in exactly one knob, over ``grid``'s values."""
    out = []
    for knob, values in grid.items():
        for v in values:
            if getattr(a, knob) != v:
                out.append(a.model_copy(update={knob: v}))
    return out


def _task_grid(task_id: str, grid: dict[str, tuple]) -> dict[str, tuple]:
    task = get_task(task_id)
    g = dict(grid)
    if not any(t.priority == 1 for t in task.tenants):
        g["priority_routing"] = (False,)
    return g


def search_best_static(task_id: str, seeds: list[int], rounds: int = 8,
                       progress=None) -> tuple[ServeAction, float, int]:
    """Coordinate ascent over ``GRID`` from vLLM's defaults: each round tries every one-knob change
    of the incumbent and keeps the best; stops when a round brings no improvement. (The full grid
    costs ~5x more simulator time; on this 2-core machine that was not affordable.)"""
    env = LLMServeEnv(task_id)
    grid = _task_grid(task_id, GRID)
    cache: dict[ServeAction, float] = {}

    def score(a: ServeAction) -> float:
        if a not in cache:
            cache[a] = _mean_score(env, _Static(a), seeds)
            if progress:
                progress()
        return cache[a]

    best = VLLM_DEFAULT
    best_score = score(best)
    for _ in range(rounds):
        cands = _neighbours(best, grid)
        scored = [(score(a), i, a) for i, a in enumerate(cands)]
        s, _, a = max(scored, key=lambda x: (x[0], -x[1]))
        if s <= best_score + 1e-9:
            break
        best, best_score = a, s
    return best, best_score, len(cache)


def search_clairvoyant(task_id: str, seeds: list[int], start: ServeAction, rounds: int = 1,
                       progress=None) -> tuple[dict[str, ServeAction], float]:
    """Per hidden phase, coordinate ascent from ``start`` (the best static configuration): try each
    one-knob change of that phase's configuration (over ``CLAIRVOYANT_GRID``) with the other phases
    fixed; keep improvements."""
    task = get_task(task_id)
    phases = PHASE_NAMES[task.workload.process]
    table = {p: start for p in phases}
    env = LLMServeEnv(task_id, privileged=True)
    best_score = _mean_score(env, _PhasePolicy(table, start), seeds)
    if len(phases) == 1:
        return table, best_score
    grid = _task_grid(task_id, CLAIRVOYANT_GRID)
    for _ in range(rounds):
        improved = False
        for p in phases:
            for a in _neighbours(table[p], grid):
                trial = dict(table)
                trial[p] = a
                s = _mean_score(env, _PhasePolicy(trial, start), seeds)
                if s > best_score + 1e-9:
                    table, best_score, improved = trial, s, True
                if progress:
                    progress()
        if not improved:
            break
    return table, best_score


def refine_best_static(task_id: str, seeds: list[int], best: ServeAction, best_score: float,
                       table: dict[str, ServeAction], rounds: int = 8) -> tuple[ServeAction, float]:
    """Multi-start: a fixed policy may use any of the clairvoyant's per-phase configurations all the
    time, so each of them is also a start of the coordinate ascent; keep the best result. (Without
    this, a local optimum of the first ascent would inflate the clairvoyant's advantage.)"""
    env = LLMServeEnv(task_id)
    grid = _task_grid(task_id, GRID)
    for start in dict.fromkeys(table.values()):
        if start == best:
            continue
        cur, cur_score = start, _mean_score(env, _Static(start), seeds)
        for _ in range(rounds):
            scored = [(_mean_score(env, _Static(a), seeds), i, a)
                      for i, a in enumerate(_neighbours(cur, grid))]
            s_, _, a = max(scored, key=lambda x: (x[0], -x[1]))
            if s_ <= cur_score + 1e-9:
                break
            cur, cur_score = a, s_
        if cur_score > best_score + 1e-9:
            best, best_score = cur, cur_score
    return best, best_score


def training_seeds(n: int) -> list[int]:
    """Seeds 0..n-1 for a search; SystemExit (one line) unless 1 <= n <= 999: training seeds stay
    below the evaluation seeds (1000 on)."""
    if not 1 <= n < 1000:
        raise SystemExit(f"--seeds must be 1..999 (training seeds stay below the evaluation seeds "
                         f"1000..), got {n}")
    return list(range(n))


def _write(path: Path, key: str, entry: dict, description: str) -> None:
    """Read-modify-write one task's entry under a file lock (searches of several tasks may run in
    parallel processes); atomic replace so a reader never sees half a file."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / f"inferencegym-{path.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {}
        data["description"] = description
        data.setdefault("tasks", {})
        data["tasks"][key] = entry
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="all")
    ap.add_argument("--seeds", type=int, default=2, help="training seeds 0..N-1")
    ap.add_argument("--rounds", type=int, default=1, help="coordinate-ascent rounds (clairvoyant)")
    ap.add_argument("--static-rounds", type=int, default=8,
                    help="max coordinate-ascent rounds of best_static (stops earlier at a local optimum)")
    ap.add_argument("--clairvoyant", action="store_true", help="also search the per-phase table")
    ap.add_argument("--skip-static", action="store_true", help="reuse the shipped best_static")
    args = ap.parse_args(argv)
    tasks = [t.task_id for t in list_tasks(kind="single")] if args.task == "all" else args.task.split(",")
    seeds = list(range(args.seeds))
    bs_path, cv_path = DATA_DIR / "best_static.json", DATA_DIR / "clairvoyant.json"
    from rich.progress import Progress

    with Progress() as prog:
        for t in tasks:
            t0 = time.time()
            if args.skip_static:
                best = ServeAction(**_best_static_table()["tasks"][t]["action"])
            else:
                bar = prog.add_task(f"best_static {t}", total=None)
                best, score, n = search_best_static(t, seeds, rounds=args.static_rounds,
                                                    progress=lambda: prog.advance(bar))
                _write(bs_path, t, {"action": best.model_dump(), "train_score": score,
                                    "train_seeds": seeds, "evaluated_configurations": n,
                                    "search_wall_s": round(time.time() - t0, 1)},
                       "best fixed configuration per task: coordinate ascent over GRID (in "
                       "inferencegym/evaluation/search_best_static.py) from vLLM defaults, on "
                       "training seeds")
                prog.console.print(f"{t}: best_static {best.model_dump()} train score {score:.4f}")
            if args.clairvoyant:
                t1 = time.time()
                bar = prog.add_task(f"clairvoyant {t}", total=None)
                table, cscore = search_clairvoyant(t, seeds, best, rounds=args.rounds,
                                                   progress=lambda: prog.advance(bar))
                _write(cv_path, t, {"phases": {p: a.model_dump() for p, a in table.items()},
                                    "train_score": cscore, "train_seeds": seeds,
                                    "search_wall_s": round(time.time() - t1, 1)},
                       "clairvoyant per-phase configurations: coordinate ascent per hidden "
                       "phase from best_static (CLAIRVOYANT_GRID), on training seeds")
                prog.console.print(f"{t}: clairvoyant train score {cscore:.4f}")
                if not args.skip_static:
                    rbest, rscore = refine_best_static(t, seeds, best, score, table)
                    if rbest != best:
                        _write(bs_path, t, {"action": rbest.model_dump(), "train_score": rscore,
                                            "train_seeds": seeds, "evaluated_configurations": n,
                                            "refined_from_clairvoyant_phases": True,
                                            "search_wall_s": round(time.time() - t0, 1)},
                               "best fixed configuration per task: coordinate ascent over GRID (in "
                               "inferencegym/evaluation/search_best_static.py) from vLLM defaults and "
                               "from each clairvoyant per-phase configuration, on training seeds")
                        prog.console.print(f"{t}: best_static refined to {rbest.model_dump()} "
                                           f"train score {rscore:.4f}")


if __name__ == "__main__":
    main()
