"""Measure the per-replica capacity constants (``capacity_rps``) of the cluster tasks.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cluster_capacity.py [--seeds 3] [--duration-s 60] [--tasks cluster_cpu_kv]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cluster_capacity.py --single --seeds 2 --duration-s 120

For every cluster task and every entry of its ``replica_hardware`` pattern, one replica with the
task's initial knobs is overloaded with the task's request lengths
(:func:`inferencegym.tasks.capacity.measure_capacity_rps`); the median over seeds is the
sustainable request rate. The task's arrival rates are ``load_fraction`` x the summed capacities.

``--single``: the same measurement for the single-agent tasks (their rates are absolute; the comment
in ``inferencegym/tasks/single.py`` states them as shares of this capacity), on the task's engine
profile and on ``vllm-2023``, with the task's mean offered rate as a share of its replicas' capacity.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OMP_NUM_THREADS", "1")

import dataclasses  # noqa: E402

from inferencegym.envs.serve_env import nominal_rates  # noqa: E402
from inferencegym.tasks.capacity import measure_capacity_rps  # noqa: E402
from inferencegym.tasks.cluster import CLUSTER_TASK_IDS  # noqa: E402
from inferencegym.tasks.spec import get_task, list_tasks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="measure cluster-task replica capacities")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=60.0)
    ap.add_argument("--single", action="store_true",
                    help="the single-agent tasks instead (their engine profile and vllm-2023)")
    ap.add_argument("--tasks", default=",".join(CLUSTER_TASK_IDS),
                    help="comma-separated cluster tasks (default: all of them)")
    args = ap.parse_args(argv)
    if args.single:
        return _single(args.seeds, args.duration_s)
    for tid in [t for t in args.tasks.split(",") if t]:
        spec = get_task(tid)
        for (gpu, tp), shipped in zip(spec.cluster.replica_hardware, spec.cluster.capacity_rps):
            vals = [measure_capacity_rps(spec, gpu, tp, seed=s, duration_s=args.duration_s)
                    for s in range(args.seeds)]
            print(f"{tid:28s} {gpu} TP{tp}: measured {statistics.median(vals):.2f} req/s "
                  f"(seeds {[round(v, 2) for v in vals]}), shipped {shipped}")
    return 0


def _single(seeds: int, duration_s: float) -> int:
    for spec in list_tasks(kind="single"):
        rate = nominal_rates(spec)[0] - spec.workload.mega_prompt_rate_per_s
        for profile in dict.fromkeys((spec.engine_profile, "vllm-2023")):
            s = dataclasses.replace(spec, engine_profile=profile)
            vals = [measure_capacity_rps(s, spec.gpu, spec.tensor_parallel, seed=k, duration_s=duration_s)
                    for k in range(seeds)]
            cap = statistics.median(vals)
            print(f"{spec.task_id:24s} {profile:9s}: {cap:.2f} req/s per replica "
                  f"(seeds {[round(v, 2) for v in vals]}); mean offered {rate:.2f} req/s = "
                  f"{rate / (cap * spec.replicas):.2f} of {spec.replicas} replica(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
