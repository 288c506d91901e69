"""Simulator speed on the reference scenario (compare with Vidur on the same scenario).

Scenario: Llama-2-7B on A100-80GB, TP1, vLLM-style batching (batch cap 128, KV budget 1.0),
round-robin routing, the Azure conversation trace (Splitwise, 19,366 requests over 3,502 s) replayed
from ``../shared/reference/vidur/data/processed_traces/splitwise_conv.csv``; 1 and 4 replicas.

    python benchmarks/sim_speed.py [--json] [--repeats 3] [--trace PATH] [--replicas 1 4]
    python benchmarks/sim_speed.py --scenario prefix [--json] [--repeats 3] [--replicas 4]

``--scenario prefix``: a prefix-heavy synthetic stream built here (no trace, no workload module):
64 shared system prompts of 500-4,000 tokens (log-uniform) with Zipf(1.1) popularity, a private
user suffix of 20-500 tokens, 20-400 output tokens, Poisson arrivals at 6 requests/s for 3,300 s
(~19,800 requests, the reference trace's size), one chained block hash per full 16-token block;
run with prefix caching on and off, round-robin and ``llmd_precise`` routing.

Prints simulated requests per wall-clock second and simulated seconds per wall-clock second
(medians over ``--repeats`` runs; wall time covers the event loop from submit to drain, not the
trace loading), and the latency figures of the run. ``--json``: one JSON object per scenario per line.
"""

from __future__ import annotations

import argparse
import dataclasses
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


def prefix_requests(seed: int = 0, *, rate: float = 6.0, duration_s: float = 3300.0, n_prefixes: int = 64,
                    block_size: int = 16) -> list:
    """The prefix-heavy stream of ``--scenario prefix`` (see the module docstring)."""
    from inferencegym.sim import Request

    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * duration_s))
    t = np.sort(rng.uniform(0.0, duration_s, n))
    plen = np.exp(rng.uniform(np.log(500), np.log(4000), n_prefixes)).astype(int)
    w = 1.0 / np.arange(1, n_prefixes + 1) ** 1.1
    which = rng.choice(n_prefixes, size=n, p=w / w.sum())
    suffix = rng.integers(20, 501, n)
    out = rng.integers(20, 401, n)
    reqs = []
    for i in range(n):
        p = int(which[i])
        prompt = int(plen[p] + suffix[i])
        shared = int(plen[p]) // block_size
        full = prompt // block_size
        hashes = tuple(range((p + 1) << 20, ((p + 1) << 20) + shared)) + tuple(
            -((i + 1) << 20) - j for j in range(full - shared))
        reqs.append(Request(req_id=i, arrival_s=float(t[i]), prompt_tokens=prompt, output_tokens=int(out[i]),
                            block_hashes=hashes))
    return reqs


def run_once(workload, replicas: int, scheduler: str = "vllm", kernel_only: bool = False, *,
             router: str = "round_robin", prefix_caching: bool = True,
             engine_profile: str = "vllm-v1") -> dict:
    from inferencegym.sim import Cluster, ClusterConfig, ExecutionModel, ReplicaConfig

    cfg = ClusterConfig(replica=ReplicaConfig(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1,
                                              scheduler=scheduler, batch_cap=128,
                                              prefix_caching=prefix_caching,
                                              engine_profile=engine_profile),
                        num_replicas=replicas, router=router)
    reqs = workload.to_requests() if hasattr(workload, "to_requests") else [
        dataclasses.replace(r) for r in workload]
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
        "prefix_hit_rate": ws.prefix_hit_rate,
        "cached_tokens": int(res["cached_tokens"].sum()),
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
    ap.add_argument("--scenario", choices=("reference", "prefix"), default="reference",
                    help="reference: the Splitwise trace (Vidur's scenario); prefix: a prefix-heavy synthetic stream")
    args = ap.parse_args(argv)
    if args.scenario == "prefix":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        return prefix_main(args)
    if not args.trace.is_file():
        print(f"trace not found: {args.trace} (pass --trace)", file=sys.stderr)
        return 2
    if args.vidur_compare:
        vidur_compare(args.trace)
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    wl = load_requests(args.trace)
    for n in args.replicas:
        runs = [run_once(wl, n, args.scheduler, args.kernel_only, engine_profile=args.engine_profile)
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


def prefix_main(args) -> int:
    reqs = prefix_requests()
    cases = [("round_robin", True), ("round_robin", False), ("llmd_precise", True)]
    for n in args.replicas:
        for router, pc in cases:
            runs = [run_once(reqs, n, args.scheduler, args.kernel_only, router=router, prefix_caching=pc)
                    for _ in range(args.repeats)]
            wall = statistics.median(r["wall_s"] for r in runs)
            r0 = runs[0]
            out = {
                "scenario": f"llama-2-7b/a100-80gb/tp1/{args.scheduler}/{router}/prefix64_zipf1.1"
                            + ("" if pc else "/no_prefix_caching"),
                "replicas": n, "requests": r0["requests"], "completed": r0["completed"],
                "wall_s_median": round(wall, 3), "wall_s_all": [round(r["wall_s"], 3) for r in runs],
                "requests_per_s": round(r0["requests"] / wall, 1),
                "cpu_s_median": round(statistics.median(r["cpu_s"] for r in runs), 3),
                "requests_per_cpu_s": round(r0["requests"] / statistics.median(r["cpu_s"] for r in runs), 1),
                "sim_s_per_wall_s": round(r0["sim_s"] / wall, 1),
                "load_average_1min": round(os.getloadavg()[0], 2),
                "sim_s": round(r0["sim_s"], 2), "iterations": r0["iterations"],
                "prefix_hit_rate": round(r0["prefix_hit_rate"], 4), "cached_tokens": r0["cached_tokens"],
                "ttft_s": r0["ttft_s"], "tpot_s": r0["tpot_s"], "preemptions": r0["preemptions"],
            }
            if args.json:
                print(json.dumps(out), flush=True)
            else:
                print(f"{out['scenario']} x{n}: {out['requests_per_s']} req/s, {out['sim_s_per_wall_s']} sim s/s "
                      f"(median wall {wall:.2f} s), hit rate {out['prefix_hit_rate']}, TTFT {out['ttft_s']}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
