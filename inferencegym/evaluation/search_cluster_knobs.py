"""Search the ``best_static_knobs`` replica knobs of a cluster task on TRAINING seeds (issue 21).

    python -m inferencegym.evaluation.search_cluster_knobs --task cluster_prefix_sharing --seeds 2

The router is ``estimated_ttft``; every replica gets the same fixed knobs. Coordinate ascent over
``KNOB_GRID`` from the task's initial knobs on seeds 0..N-1 (evaluation uses 1000..): each round
tries every one-knob change and keeps the best by mean grade (ties: lower mean p90 TTFT); stops when
a round brings no improvement. Writes ``inferencegym/data/best_static_knobs.json``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from inferencegym.evaluation.cluster import run_cluster_episode
from inferencegym.evaluation.search_best_static import DATA_DIR, _write, training_seeds
from inferencegym.policies.routers import ClusterPolicy, EstimatedTTFTRouter, FixedKnobsReplica
from inferencegym.tasks.cluster_grading import grade_cluster
from inferencegym.tasks.spec import get_task

KNOB_GRID: dict[str, tuple] = {
    "batch_cap": (16, 32, 64, 128, 256),
    "kv_budget_fraction": (0.85, 1.0),
    "speculation_depth": (0, 2),
    "chunk_size": (256, 512, 1024, 2048),
}
"""Values per knob (a subset of the replica agents' buckets, ``cluster_spaces.KNOB_BUCKETS``)."""


def score_policy(task_id: str, make_policy, seeds: list[int]) -> tuple[float, float]:
    """(mean grade, -mean p90 TTFT) of the cluster policy ``make_policy()`` (a fresh one per
    episode) on ``seeds``: the search objective of the cluster rules, grade first, p90 TTFT on ties."""
    g, p90 = [], []
    for s in seeds:
        log, _ = run_cluster_episode(task_id, make_policy(), s)
        g.append(grade_cluster(task_id, log).score)
        p90.append(log.metrics["cluster/ttft_p90_s"])
    return float(np.mean(g)), -float(np.mean(p90))


def _score(task_id: str, knobs: dict, seeds: list[int]) -> tuple[float, float]:
    """(mean grade, -mean p90 TTFT) of estimated_ttft + these fixed knobs on ``seeds``."""
    return score_policy(task_id, lambda: ClusterPolicy(EstimatedTTFTRouter(), FixedKnobsReplica(knobs),
                                                       name="best_static_knobs"), seeds)


def search_cluster_knobs(task_id: str, seeds: list[int], rounds: int = 4, log=print) -> dict:
    """Coordinate ascent over ``KNOB_GRID`` (module docstring)."""
    task = get_task(task_id)
    if task.kind != "cluster":
        raise ValueError(f"{task_id!r} is not a cluster task; best_static_knobs is for cluster tasks")
    k = task.knobs
    cur = {"batch_cap": k.batch_cap, "kv_budget_fraction": 0.85 if k.kv_budget_fraction < 0.95 else 1.0,
           "speculation_depth": k.speculation_depth, "chunk_size": task.chunk_size_tokens}
    cache: dict[tuple, tuple[float, float]] = {}

    def score(kn: dict) -> tuple[float, float]:
        key = tuple(sorted(kn.items()))
        if key not in cache:
            cache[key] = _score(task_id, kn, seeds)
        return cache[key]

    def neighbours(kn: dict) -> list[dict]:
        return [{**kn, knob: v} for knob, vals in KNOB_GRID.items() for v in vals if kn[knob] != v]

    cur, best = coordinate_ascent(cur, neighbours, score, rounds, log, f"{task_id}: start {cur}")
    return {"knobs": cur, "train_score": best[0], "train_ttft_p90_s": -best[1], "train_seeds": seeds,
            "evaluated": len(cache)}


def coordinate_ascent(start: dict, neighbours, score, rounds: int, log, start_label: str,
                      show=str) -> tuple[dict, tuple[float, float]]:
    """Greedy ascent of the cluster rule searches: each round scores every neighbour of the current
    point (``score`` -> (grade, -p90 TTFT), memoised by the caller) and moves to the best one (grade
    first, then p90; ties to the first listed) while it beats the current point. Returns the point
    and its score."""
    cur, best = start, score(start)
    log(f"{start_label} -> grade {best[0]:.4f}, p90 {-best[1]:.3f} s")
    for r in range(rounds):
        scored = [(score(c), i, c) for i, c in enumerate(neighbours(cur))]
        s, _, c = max(scored, key=lambda x: (x[0][0], x[0][1], -x[1]))
        if s <= best:
            break
        cur, best = c, s
        log(f"  round {r}: {show(cur)} -> grade {best[0]:.4f}, p90 {-best[1]:.3f} s")
    return cur, best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--seeds", type=int, default=2, help="training seeds 0..N-1 (< 1000)")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    seeds = training_seeds(args.seeds)
    t0 = time.time()
    entry = search_cluster_knobs(args.task, seeds, rounds=args.rounds)
    entry["search_wall_s"] = round(time.time() - t0, 1)
    _write(DATA_DIR / "best_static_knobs.json", args.task, entry,
           "best_static_knobs: fixed replica knobs with the estimated_ttft router, coordinate ascent "
           "from the task's initial knobs on training seeds")
    print(f"{args.task}: {entry['knobs']} train grade {entry['train_score']:.4f} "
          f"({entry['evaluated']} evaluated, {entry['search_wall_s']} s)")


if __name__ == "__main__":
    main()
