"""Measured capacity of one replica under a task's request lengths (what cluster task loads follow)."""

from __future__ import annotations

import dataclasses

import numpy as np

from inferencegym.tasks.adapter import build_requests, make_cluster
from inferencegym.tasks.spec import ClusterOptions, TaskSpec


def measure_capacity_rps(spec: TaskSpec, gpu: str, tensor_parallel: int, *, seed: int = 0,
                         duration_s: float = 60.0, overload_rps: float = 20.0) -> float:
    """Measure one replica's sustainable request rate under the task's lengths (overload run).

    One replica with the task's initial knobs is fed the task's request lengths as a Poisson stream
    at ``overload_rps`` (several times its capacity, so its queue never empties) for ``duration_s``;
    capacity = requests completed per second after the first quarter (warm-up). Used to produce the
    ``capacity_rps`` constants of the cluster tasks and the loads of the single-agent tasks
    (``benchmarks/cluster_capacity.py [--single]``). Prefix-sharing workloads run
    with prefix caching on (the simulator's default): all their prefixes meet on the one replica,
    in its one cache.
    """
    options = spec.cluster if spec.cluster is not None else ClusterOptions()  # single-agent tasks
    one = dataclasses.replace(spec, replicas=1, cluster=dataclasses.replace(
        options, replica_hardware=((gpu, tensor_parallel),)))
    rng = np.random.default_rng(seed)
    # Overload: a long Poisson stream at a high rate; capacity = completions per second while busy.
    # A prefix-sharing workload keeps its sessions (and so its cache hits) at the overload rate.
    process = "prefix" if one.workload.process == "prefix" else "poisson"
    w = dataclasses.replace(one.workload, process=process, rate_rps=overload_rps,
                            mega_prompt_rate_per_s=0.0)
    reqs = build_requests(dataclasses.replace(one, workload=w), duration_s, rng)
    cluster = make_cluster(one, rng, router="round_robin")
    cluster.submit(reqs)
    cluster.run_until(duration_s)
    done = [r for r in reqs if r.done and r.completion_s <= duration_s]
    warm = 0.25 * duration_s
    n = sum(1 for r in done if r.completion_s > warm)
    return n / (duration_s - warm)
