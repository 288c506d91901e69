"""Simulator speed on the reference scenario (compare with Vidur on the same scenario).

Scenario: Llama-2-7B on A100-80GB, TP1, vLLM-style batching (batch cap 128, KV budget 1.0),
round-robin routing, the Azure conversation trace (Splitwise, 19,366 requests over 3,502 s) replayed
from ``../shared/reference/vidur/data/processed_traces/splitwise_conv.csv``; 1 and 4 replicas.

    python benchmarks/sim_speed.py [--json] [--repeats 3] [--trace PATH] [--replicas 1 4]

Prints simulated requests per wall-clock second and simulated seconds per wall-clock second
(medians over ``--repeats`` runs; wall time covers the event loop from submit to drain, not the
trace loading), and the latency figures of the run. ``--json``: one JSON object per scenario per line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "reference" / "vidur" / "data" / "processed_traces" / "splitwise_conv.csv"

# Vidur (GitHub main @7d47513, this scenario, 4 replicas): 143 req/s, 25.9 sim s per wall s
VIDUR_REQ_PER_S = 143.0


def load_requests(path: Path):
    from inferencegym.workload import load_trace

    return load_trace(path, format="replay")


def run_once(workload, replicas: int, scheduler: str = "vllm", kernel_only: bool = False,
             engine_profile: str = "vllm-v1") -> dict:
    from inferencegym.sim import Cluster, ClusterConfig, ExecutionModel, ReplicaConfig

    cfg = ClusterConfig(replica=ReplicaConfig(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1,
                                              scheduler=scheduler, batch_cap=128,
                                              engine_profile=engine_profile),
                        num_replicas=replicas, router="round_robin")
    reqs = workload.to_requests()
    model = None
    if kernel_only:  # what Vidur's profiles measure: no per-iteration engine overhead
        model = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1,
                                           engine_overhead=False)
    cluster = Cluster(cfg, rng=np.random.default_rng(0), execution_model=model)
    t0 = time.perf_counter()
    c0 = time.process_time()
    cluster.submit(reqs)
    cluster.drain()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    ws = cluster.run_stats()
    res = cluster.results()
    done = ~res["rejected"]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "sim_s": cluster.now_s,
        "requests": len(reqs),
        "completed": int(done.sum()),
        "iterations": sum(r.iterations for r in cluster.replicas),
        "ttft_s": ws.ttft_s,
        "tbt_s": ws.tbt_s,
        "tpot_s": ws.tpot_s,
        "e2e_s": ws.e2e_s,
        "preemptions": int(res["preemptions"].sum()),
    }


VIDUR_RESULTS = REPO.parent / "shared" / "reference" / "vidur" / "derived" / "vidur_scenario_results_llama2_7b_a100.csv"
COMPARE = [  # (Vidur label, scheduler, replicas, qps or None for the trace replay)
    ("r1_vllm_fixed512x128_qps2", "vllm", 1, 2.0), ("r1_vllm_fixed512x128_qps4", "vllm", 1, 4.0),
    ("r1_vllm_fixed512x128_qps8", "vllm", 1, 8.0), ("r1_sarathi_fixed512x128_qps4", "sarathi", 1, 4.0),
    ("r4_round_robin_vllm_fixed512x128_qps16", "vllm", 4, 16.0),
    ("r4_round_robin_vllm_fixed512x128_qps32", "vllm", 4, 32.0),
    ("r4_round_robin_vllm_splitwise_conv_trace", "vllm", 4, None),
    ("r4_round_robin_sarathi_splitwise_conv_trace", "sarathi", 4, None),
]


def vidur_compare(trace: Path) -> None:
    """Latency of Vidur's scenarios here (kernel-only model, like Vidur's profiles, and the full model)
    next to Vidur's own output; Poisson scenarios use 2,000 (r1) / 4,000 (r4) requests of 512/128."""
    import pandas as pd

    from inferencegym.sim import Cluster, ClusterConfig, ExecutionModel, ReplicaConfig, Request

    vid = pd.read_csv(VIDUR_RESULTS).set_index("label")
    wl = load_requests(trace)
    cols = ["ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tbt_p99_s", "e2e_p50_s", "e2e_p99_s"]
    for label, sched, n, qps in COMPARE:
        row = {"vidur": {c: round(float(vid.loc[label, c]), 4) for c in cols}}
        for mode in ("kernel_only", "full"):
            model = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1,
                                               engine_overhead=(mode == "full"))
            cfg = ClusterConfig(replica=ReplicaConfig(scheduler=sched, batch_cap=128, chunk_size=512),
                                num_replicas=n, router="round_robin")
            if qps is None:
                reqs = wl.to_requests()
            else:
                rng = np.random.default_rng(0)
                t = np.cumsum(rng.exponential(1.0 / qps, size=2000 * n))
                reqs = [Request(req_id=i, arrival_s=float(x), prompt_tokens=512, output_tokens=128)
                        for i, x in enumerate(t)]
            cl = Cluster(cfg, rng=np.random.default_rng(0), execution_model=model)
            cl.submit(reqs)
            cl.drain()
            ws = cl.run_stats()
            row[mode] = {"ttft_p50_s": ws.ttft_s["p50"], "ttft_p99_s": ws.ttft_s["p99"],
                         "tpot_p50_s": ws.tpot_s["p50"], "tbt_p99_s": ws.tbt_s["p99"],
                         "e2e_p50_s": ws.e2e_s["p50"], "e2e_p99_s": ws.e2e_s["p99"]}
            row[mode] = {k: round(v, 4) for k, v in row[mode].items()}
        print(json.dumps({"scenario": label, **row}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per scenario per line")
    ap.add_argument("--repeats", type=int, default=3, help="runs per scenario (median reported)")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="replay CSV (arrived_at,...)")
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--scheduler", default="vllm")
    ap.add_argument("--engine-profile", default="vllm-v1",
                    help="engine overhead profile: vllm-v1, vllm-2023 (the pre-profile default) or kernel-only")
    ap.add_argument("--kernel-only", action="store_true",
                    help="execution model without the fitted engine overhead (like Vidur's profiles)")
    ap.add_argument("--vidur-compare", action="store_true",
                    help="latency on Vidur's scenarios next to Vidur's own figures (JSON lines)")
    args = ap.parse_args(argv)
    if not args.trace.is_file():
        print(f"trace not found: {args.trace} (pass --trace)", file=sys.stderr)
        return 2
    if args.vidur_compare:
        vidur_compare(args.trace)
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    wl = load_requests(args.trace)
    for n in args.replicas:
        runs = [run_once(wl, n, args.scheduler, args.kernel_only, args.engine_profile)
                for _ in range(args.repeats)]
        wall = statistics.median(r["wall_s"] for r in runs)
        r0 = runs[0]
        out = {
            "scenario": (f"llama-2-7b/a100-80gb/tp1/{args.scheduler}/round_robin/splitwise_conv"
                         + ("/kernel_only" if args.kernel_only else f"/{args.engine_profile}")),
            "replicas": n,
            "requests": r0["requests"],
            "completed": r0["completed"],
            "wall_s_median": round(wall, 3),
            "wall_s_all": [round(r["wall_s"], 3) for r in runs],
            "requests_per_s": round(r0["requests"] / wall, 1),
            "cpu_s_median": round(statistics.median(r["cpu_s"] for r in runs), 3),
            "requests_per_cpu_s": round(r0["requests"] / statistics.median(r["cpu_s"] for r in runs), 1),
            "load_average_1min": round(os.getloadavg()[0], 2),
            "sim_s_per_wall_s": round(r0["sim_s"] / wall, 1),
            "iterations_per_wall_s": round(r0["iterations"] / wall, 0),
            "sim_s": round(r0["sim_s"], 2),
            "iterations": r0["iterations"],
            "speedup_vs_vidur_143_req_s": round(r0["requests"] / wall / VIDUR_REQ_PER_S, 1),
            "ttft_s": r0["ttft_s"], "tbt_s": r0["tbt_s"], "tpot_s": r0["tpot_s"], "e2e_s": r0["e2e_s"],
            "preemptions": r0["preemptions"],
        }
        if args.json:
            print(json.dumps(out), flush=True)
        else:
            print(f"{out['scenario']} x{n}: {out['requests_per_s']} req/s, {out['sim_s_per_wall_s']} sim s/s, "
                  f"{out['iterations_per_wall_s']:.0f} iter/s (median wall {wall:.2f} s, "
                  f"{out['speedup_vs_vidur_143_req_s']}x Vidur)\n  TTFT {out['ttft_s']}\n  TPOT {out['tpot_s']}\n"
                  f"  TBT {out['tbt_s']}\n  E2E {out['e2e_s']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
