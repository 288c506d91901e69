"""Where one process of the peer scenarios spends its CPU (``time.process_time``, seconds): imports
(the ``simulate`` command's modules), trace load, requests, cluster build, submit, drain (the event
loop), statistics. The scenarios are those of ``../shared/tools/peers/speed_side_by_side.py``
(``azure``: conversation trace clipped to 4,096 tokens, 4 x A100, Llama-2-7B; ``mooncake``: the
synthetic Mooncake trace with prefix caching, 8 x H100, Llama-3-8B; round robin, vLLM).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python -P benchmarks/sim_cpu_split.py mooncake
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python -P benchmarks/sim_cpu_split.py azure --azure-replay /tmp/peers_out/conv_clipped_replay.csv

(``--azure-replay``: the clipped replay CSV the peer tool writes; ``-P`` with ``PYTHONPATH=TREE``
times another source tree.) Prints one JSON line.
"""

from __future__ import annotations

import time

_T0 = time.process_time()

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import inferencegym.cli.simulate  # noqa: E402,F401  (what the simulate command imports)

_T1 = time.process_time()
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def main(argv=None) -> int:
    from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, TenantSpec
    from inferencegym.workload import load_trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", choices=["azure", "mooncake"])
    ap.add_argument("--mooncake", type=Path, default=SHARED / "reference/traces/mooncake/synthetic_trace.jsonl")
    ap.add_argument("--azure-replay", type=Path, default=Path("/tmp/peers_out/conv_clipped_replay.csv"))
    a = ap.parse_args(argv)
    t = [time.process_time()]
    if a.scenario == "mooncake":
        wl = load_trace(a.mooncake, format="mooncake")
        rc = ReplicaConfig(model="llama-3-8b", gpu="h100-80gb", tensor_parallel=1, scheduler="vllm",
                           prefix_caching=True)
        n = 8
    else:
        if not a.azure_replay.is_file():
            raise SystemExit(f"{a.azure_replay}: not found; run the peer tool once (it writes the clipped trace) "
                             f"or give --azure-replay")
        wl = load_trace(a.azure_replay, format="replay")
        rc = ReplicaConfig(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, scheduler="vllm", batch_cap=128)
        n = 4
    t.append(time.process_time())
    reqs = wl.to_requests()
    t.append(time.process_time())
    cl = Cluster(ClusterConfig(replica=rc, num_replicas=n, router="round_robin", tenants=(TenantSpec(),)),
                 rng=np.random.default_rng(0))
    t.append(time.process_time())
    cl.submit(reqs)
    t.append(time.process_time())
    cl.drain()
    t.append(time.process_time())
    ws = cl.run_stats()
    cl.results()
    t.append(time.process_time())
    d = np.diff(t)
    out = {"scenario": a.scenario, "import_s": round(_T1 - _T0, 3), "load_s": round(d[0], 3),
           "to_requests_s": round(d[1], 3), "build_s": round(d[2], 3), "submit_s": round(d[3], 3),
           "drain_s": round(d[4], 3), "stats_s": round(d[5], 3), "total_s": round(t[-1], 3),
           "completed": ws.completions if hasattr(ws, "completions") else None,
           "prefix_hit_rate": ws.prefix_hit_rate}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
