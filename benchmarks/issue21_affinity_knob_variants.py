"""Knob variants around the ``best_affinity_p90`` rule on ``cluster_prefix_sharing`` (issue 21, eleventh session):
the same router (``estimated_ttft_affinity``, 0.02 s) with other replica policies, paired with the rule.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_affinity_knob_variants.py --seed 12 --episodes 40

Variants: ``replica_load_knobs`` (the shipped load-dependent knob rule), speculation off, batch cap 32. Per variant
the paired p90 TTFT change ± 95 % half-width, seeds lower, the throughput change and the grade difference.
Training or validation seeds only.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.evaluation.cluster import run_cluster_episode  # noqa: E402
from inferencegym.evaluation.paired import ci95  # noqa: E402
from inferencegym.policies.routers import (  # noqa: E402
    AffinityEstimatedTTFTRouter,
    ClusterPolicy,
    FixedKnobsReplica,
    LoadKnobsReplica,
)
from inferencegym.tasks.cluster_grading import grade_cluster  # noqa: E402

TASK = "cluster_prefix_sharing"
WEIGHT_S = 0.02


def _policy(replica) -> ClusterPolicy:
    router = AffinityEstimatedTTFTRouter()
    router.affinity_s = WEIGHT_S
    return ClusterPolicy(router, replica, name="variant")


def _run(make, seeds: list[int]) -> np.ndarray:
    out = []
    for s in seeds:
        log, _ = run_cluster_episode(TASK, make(), s)
        m = log.metrics
        out.append((grade_cluster(TASK, log).score, m["cluster/ttft_p90_s"], m["cluster/throughput_tok_s"]))
    return np.array(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--episodes", type=int, default=40)
    args = ap.parse_args(argv)
    if args.seed + args.episodes > 1000:
        raise SystemExit("use training or validation seeds (< 1000): held-out seeds are for issue21_paired.py")
    seeds = list(range(args.seed, args.seed + args.episodes))
    base = _run(lambda: _policy(FixedKnobsReplica()), seeds)
    knobs = {"batch_cap": 16, "chunk_size": 2048, "kv_budget_fraction": 1.0, "speculation_depth": 2}
    variants = {"replica_load_knobs": lambda: _policy(LoadKnobsReplica()),
                "speculation 0": lambda: _policy(FixedKnobsReplica({**knobs, "speculation_depth": 0})),
                "batch cap 32": lambda: _policy(FixedKnobsReplica({**knobs, "batch_cap": 32}))}
    for name, make in variants.items():
        r = _run(make, seeds)
        d = list(r[:, 1] / base[:, 1] - 1)
        print(f"{name}: p90 {np.mean(d):+.2%} ± {ci95(d):.2%} (lower on {sum(x < 0 for x in d)}/{len(d)}); "
              f"throughput {np.mean(r[:, 2] / base[:, 2] - 1):+.2%}; grade {np.mean(r[:, 0] - base[:, 0]):+.4f}", flush=True)


if __name__ == "__main__":
    main()
