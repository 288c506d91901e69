"""Measure the per-replica capacity constants (``capacity_rps``) of the cluster tasks.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cluster_capacity.py [--seeds 3] [--duration-s 60]

For every cluster task and every entry of its ``replica_hardware`` pattern, one replica with the
task's initial knobs is overloaded with the task's request lengths
(:func:`inferencegym.tasks.capacity.measure_capacity_rps`); the median over seeds is the
sustainable request rate. The task's arrival rates are ``load_fraction`` x the summed capacities.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OMP_NUM_THREADS", "1")

from inferencegym.tasks.capacity import measure_capacity_rps  # noqa: E402
from inferencegym.tasks.cluster import CLUSTER_TASK_IDS  # noqa: E402
from inferencegym.tasks.spec import get_task  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="measure cluster-task replica capacities")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=60.0)
    args = ap.parse_args(argv)
    for tid in CLUSTER_TASK_IDS:
        spec = get_task(tid)
        for (gpu, tp), shipped in zip(spec.cluster.replica_hardware, spec.cluster.capacity_rps):
            vals = [measure_capacity_rps(spec, gpu, tp, seed=s, duration_s=args.duration_s)
                    for s in range(args.seeds)]
            print(f"{tid:28s} {gpu} TP{tp}: measured {statistics.median(vals):.2f} req/s "
                  f"(seeds {[round(v, 2) for v in vals]}), shipped {shipped}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
