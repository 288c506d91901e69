"""Affinity-weight sweep of ``estimated_ttft_affinity`` on a prefix task, paired with ``best_static_knobs``
(issue 21, eleventh session): the same fixed knobs (``best_static_knobs``'), weight 0 = that rule.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_affinity_sweep.py --task cluster_prefix_sharing \\
        --seed 12 --episodes 40 --weights 0.003,0.01,0.02,0.03,0.05,0.1,0.3,1.0,3.0

Per weight: mean p90 TTFT, the mean per-seed relative p90 change ± its 95 % half-width and the seeds where
it is lower, the p99 and throughput changes and the grade difference. Training (< 500) or validation
(500-999) seeds only: the held-out comparison is ``issue21_paired.py``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.evaluation.cluster import run_cluster_episode  # noqa: E402
from inferencegym.evaluation.paired import ci95  # noqa: E402
from inferencegym.evaluation.search_cluster_knobs import _affinity_policy  # noqa: E402
from inferencegym.policies.knob_rules import base_knobs  # noqa: E402
from inferencegym.tasks.cluster_grading import grade_cluster  # noqa: E402
from inferencegym.tasks.spec import get_task  # noqa: E402


def run(task: str, weight: float, seeds: list[int]) -> np.ndarray:
    """Per seed (grade, p90, p99, throughput) of the weight with ``best_static_knobs``' knobs."""
    out = []
    for s in seeds:
        log, _ = run_cluster_episode(task, _affinity_policy({**base_knobs(get_task(task)), "affinity_s": weight}), s)
        m = log.metrics
        out.append((grade_cluster(task, log).score, m["cluster/ttft_p90_s"], m["cluster/ttft_p99_s"],
                    m["cluster/throughput_tok_s"]))
    return np.array(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="cluster_prefix_sharing")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--weights", default="0.003,0.01,0.02,0.03,0.05,0.1,0.3,1.0,3.0")
    args = ap.parse_args(argv)
    if args.seed + args.episodes > 1000:
        raise SystemExit(f"seeds {args.seed}..{args.seed + args.episodes - 1} reach the held-out seeds (1000..); "
                         f"use training or validation seeds")
    seeds = list(range(args.seed, args.seed + args.episodes))
    base = run(args.task, 0.0, seeds)
    print(f"{args.task} best_static_knobs (weight 0): grade {base[:, 0].mean():.4f} p90 {base[:, 1].mean():.4f} s", flush=True)
    for w in (float(x) for x in args.weights.split(",")):
        r = run(args.task, w, seeds)
        d = r[:, 1] / base[:, 1] - 1
        print(f"weight {w:g} s: p90 {r[:, 1].mean():.4f} s, paired {d.mean():+.2%} ± {ci95(list(d)):.2%} "
              f"(lower on {int((d < 0).sum())}/{len(d)}); p99 {(r[:, 2] / base[:, 2] - 1).mean():+.1%}; "
              f"throughput {(r[:, 3] / base[:, 3] - 1).mean():+.2%}; grade {(r[:, 0] - base[:, 0]).mean():+.4f}", flush=True)


if __name__ == "__main__":
    main()
