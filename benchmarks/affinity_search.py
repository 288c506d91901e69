"""Search the affinity weight of ``estimated_ttft_affinity`` on TRAINING seeds of the prefix tasks.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/affinity_search.py --seeds 2 \\
        --weights 0 0.05 0.1 0.2 0.4 [--tasks cluster_prefix_sharing,cluster_multiturn]

For each weight (seconds of estimated TTFT a fully cached prompt is worth beyond its own prefill
saving), the router runs with the task's initial replica knobs on seeds 0..N-1 (< 1000; evaluation
uses 1000..). Prints mean grade and p90 TTFT per task and weight; the weight with the best summed
grade (ties: lower p90) is the one to ship as ``routers.AFFINITY_S`` if it beats 0 (plain
``estimated_ttft``).
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.evaluation.cluster import run_cluster_episode  # noqa: E402
from inferencegym.policies.routers import AffinityEstimatedTTFTRouter, ClusterPolicy, StaticReplica  # noqa: E402
from inferencegym.tasks.cluster_grading import grade_cluster  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2, 0.4])
    ap.add_argument("--tasks", default="cluster_prefix_sharing,cluster_multiturn")
    args = ap.parse_args()
    if not 1 <= args.seeds < 1000:
        raise SystemExit(f"--seeds must be 1..999 (training seeds), got {args.seeds}")
    out = {}
    for w in args.weights:
        for task in args.tasks.split(","):
            g, p90 = [], []
            for s in range(args.seeds):
                router = AffinityEstimatedTTFTRouter()
                router.affinity_s = w
                log, _ = run_cluster_episode(task, ClusterPolicy(router, StaticReplica()), s)
                g.append(grade_cluster(task, log).score)
                p90.append(log.metrics["cluster/ttft_p90_s"])
            out.setdefault(str(w), {})[task] = {"grade": float(np.mean(g)), "ttft_p90_s": float(np.mean(p90))}
            print(f"affinity {w:.3f} s  {task}: grade {np.mean(g):.4f}  p90 TTFT {np.mean(p90):.3f} s", flush=True)
    best = max(out, key=lambda w: (sum(v["grade"] for v in out[w].values()),
                                   -sum(v["ttft_p90_s"] for v in out[w].values())))
    print(json.dumps({"best_affinity_s": float(best), "by_weight": out}))


if __name__ == "__main__":
    main()
