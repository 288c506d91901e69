"""Capacity of one ``cluster_autoscaling`` replica: SLO attainment, p90 TTFT and requests in the
replica (running + waiting) under Poisson load, the task's lengths and SLO (600 s per rate).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/control_capacity.py

``ControlTask.capacity_rps`` is the highest rate with >= 95 % SLO attainment;
``concurrency_at_capacity`` the mean running + waiting requests there.
"""

from __future__ import annotations

import argparse

import numpy as np

from inferencegym.sim.config import ClusterConfig, ReplicaConfig
from inferencegym.sim.fleet import Fleet, FleetConfig
from inferencegym.sim.lifecycle import LifecycleConfig
from inferencegym.tasks.control import get_control_task
from inferencegym.workload.lengths import LognormalLengths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="2.5,3.0,3.5,4.0")
    ap.add_argument("--duration-s", type=float, default=600.0)
    a = ap.parse_args()
    task = get_control_task("cluster_autoscaling")
    lengths = LognormalLengths(prompt_mu=task.prompt_mu, prompt_sigma=task.prompt_sigma, output_mu=task.output_mu,
                               output_sigma=task.output_sigma, max_tokens=(4096, 1024))
    cc = ClusterConfig(replica=ReplicaConfig(model=task.model, gpu=task.gpu, tensor_parallel=task.tensor_parallel),
                       router="least_outstanding_requests", tenants=task.tenants())
    print("| rate req/s | SLO attainment | p90 TTFT s | running + waiting |")
    print("|---:|---:|---:|---:|")
    for rate in (float(x) for x in a.rates.split(",")):
        rng = np.random.default_rng(0)
        t = np.cumsum(rng.exponential(1 / rate, int(rate * a.duration_s * 1.3) + 10))
        t = t[t < a.duration_s]
        p, o = lengths.sample(len(t), rng)
        f = Fleet(cc, FleetConfig(lifecycle=LifecycleConfig(max_replicas=1, initial_replicas=1)),
                  {"arrival_s": t, "prompt_tokens": p, "output_tokens": o}, rng=np.random.default_rng(1))
        f.run_until(a.duration_s)
        conc = np.mean(f.history["running"]) + np.mean(f.history["waiting"])
        f.finish()
        s = f.summary()
        print(f"| {rate:.1f} | {s['slo_attainment']:.3f} | {s['tier_ttft_p90_s']['standard']:.2f} | {conc:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
