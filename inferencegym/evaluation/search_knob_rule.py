"""Search the ``replica_load_knobs`` rule of a cluster task on TRAINING seeds (issue 21, item 4).

    python -m inferencegym.evaluation.search_knob_rule --task cluster_prefix_sharing --seeds 4

Two load levels split at one threshold (running + queued requests of the replica). Start: both
levels at the task's ``best_static_knobs`` (the rule then IS best_static_knobs, so the search can
only keep or improve it on the training seeds). Coordinate ascent: each round tries every
threshold in ``THRESHOLDS`` and every one-knob change of one level over the replica agents'
buckets, keeps the best by mean grade (ties: lower mean p90 TTFT), stops when a round brings no
improvement. The router is ``estimated_ttft``. Writes ``inferencegym/data/knob_rules.json``.
"""

from __future__ import annotations

import argparse
import json
import time

from inferencegym.envs.cluster_spaces import KNOB_BUCKETS
from inferencegym.evaluation.search_best_static import DATA_DIR, _write, training_seeds
from inferencegym.evaluation.search_cluster_knobs import coordinate_ascent, score_policy
from inferencegym.policies.knob_rules import KNOB_NAMES, LoadKnobsReplica
from inferencegym.policies.routers import ClusterPolicy, EstimatedTTFTRouter, best_static_knobs
from inferencegym.tasks.spec import get_task

THRESHOLDS: tuple[float, ...] = (2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0)
"""Candidate load thresholds (running + queued requests of one replica)."""


def score_rule(task_id: str, rule: dict, seeds: list[int]) -> tuple[float, float]:
    """(mean grade, -mean p90 TTFT) of estimated_ttft + this rule on ``seeds``."""
    return score_policy(task_id, lambda: ClusterPolicy(EstimatedTTFTRouter(), LoadKnobsReplica(rule),
                                                       name="load_knobs_rule"), seeds)


def search_knob_rule(task_id: str, seeds: list[int], rounds: int = 4, log=print) -> dict:
    """Coordinate ascent (module docstring)."""
    task = get_task(task_id)
    if task.kind != "cluster":
        raise ValueError(f"{task_id!r} is not a cluster task; replica_load_knobs is for cluster tasks")
    base = best_static_knobs(task_id)
    if base is None:
        raise ValueError(f"{task_id!r} has no best_static_knobs; run search_cluster_knobs first")
    cur = {"thresholds": [8.0], "levels": [dict(base), dict(base)]}
    cache: dict[str, tuple[float, float]] = {}

    def score(rule: dict) -> tuple[float, float]:
        key = json.dumps(rule, sort_keys=True)
        if key not in cache:
            cache[key] = score_rule(task_id, rule, seeds)
        return cache[key]

    def neighbours(cur: dict) -> list[dict]:
        cands = [] if cur["levels"][0] == cur["levels"][1] else \
            [{**cur, "thresholds": [t]} for t in THRESHOLDS if [t] != cur["thresholds"]]
        for lv in range(2):
            for name, buckets in zip(KNOB_NAMES, KNOB_BUCKETS):
                for v in buckets:
                    if cur["levels"][lv][name] != v:
                        levels = [dict(x) for x in cur["levels"]]
                        levels[lv][name] = v
                        cands.append({"thresholds": list(cur["thresholds"]), "levels": levels})
        return cands

    cur, best = coordinate_ascent(cur, neighbours, score, rounds, log,
                                  f"{task_id}: start (= best_static_knobs)", show=json.dumps)
    return {"rule": cur, "train_score": best[0], "train_ttft_p90_s": -best[1],
            "base_train_score": cache[next(iter(cache))][0], "train_seeds": seeds, "evaluated": len(cache)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--seeds", type=int, default=4, help="training seeds 0..N-1 (< 1000)")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    seeds = training_seeds(args.seeds)
    t0 = time.time()
    entry = search_knob_rule(args.task, seeds, rounds=args.rounds)
    entry["search_wall_s"] = round(time.time() - t0, 1)
    _write(DATA_DIR / "knob_rules.json", args.task, entry,
           "replica_load_knobs: per-replica knobs by the replica's own load (two levels, one threshold), "
           "coordinate ascent from best_static_knobs on training seeds")
    print(f"{args.task}: {json.dumps(entry['rule'])} train grade {entry['train_score']:.4f} "
          f"(best_static_knobs {entry['base_train_score']:.4f}; {entry['evaluated']} evaluated, "
          f"{entry['search_wall_s']} s)")


if __name__ == "__main__":
    main()
