"""The Azure peer scenario's event loop on the first ``--requests`` requests, for instruction counts
(``valgrind --tool=callgrind``): with ``--no-drain`` everything but the drain, so the difference of
two runs is the drain's instructions (issue 24, sixth pass; docs/bench/simcore.md).

    head -1501 /tmp/ls/pa4/conv_clipped_replay.csv > /tmp/ls/s1500.csv
    for M in --drain --no-drain; do PYTHONHASHSEED=0 PYTHONPATH=$PWD valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
      .venv/bin/python -P benchmarks/drain_first_n.py /tmp/ls/s1500.csv $M 2>&1 | grep Collected; done
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, TenantSpec
from inferencegym.workload import load_trace


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("replay", type=Path, help="a replay-format CSV (the peer tool's conv_clipped_replay.csv, cut)")
    ap.add_argument("--drain", action=argparse.BooleanOptionalAction, default=True)
    a = ap.parse_args(argv)
    if not a.replay.is_file():
        raise SystemExit(f"{a.replay}: not found; run benchmarks/peers_before_after.py once (it writes the replay)")
    reqs = load_trace(a.replay, format="replay").to_requests()
    rc = ReplicaConfig(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, scheduler="vllm", batch_cap=128)
    cl = Cluster(ClusterConfig(replica=rc, num_replicas=4, router="round_robin", tenants=(TenantSpec(),)),
                 rng=np.random.default_rng(0))
    cl.submit(reqs)
    if a.drain:
        cl.drain()
    print(f"requests {len(reqs)} completed {cl.n_completed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
