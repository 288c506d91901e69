"""Routers on a prefix-heavy stream: prefix hit rate, TTFT and throughput per router.

The stream is ``sim_speed.prefix_requests`` (64 shared system prompts of 500-4,000 tokens, Zipf(1.1)
popularity, private suffixes; see benchmarks/sim_speed.py) at ``--rate`` requests/s for
``--duration-s``, on ``--replicas`` Llama-2-7B / A100-80GB replicas (vLLM batching, prefix caching
on, KV budget ``--kv-budget-fraction``).

    python benchmarks/prefix_routers.py [--rate 12] [--duration-s 600] [--replicas 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_speed import prefix_requests  # noqa: E402

ROUTERS = ["round_robin", "least_outstanding_requests", "least_kv_load", "llmd_precise", "llmd_approx",
           "sglang_cache_aware", "dynamo_kv"]


def main(argv: list[str] | None = None) -> int:
    from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=12.0)
    ap.add_argument("--duration-s", type=float, default=600.0)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--kv-budget-fraction", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    base = prefix_requests(args.seed, rate=args.rate, duration_s=args.duration_s)
    for router in ROUTERS:
        cfg = ClusterConfig(replica=ReplicaConfig(kv_budget_fraction=args.kv_budget_fraction),
                            num_replicas=args.replicas, router=router)
        cl = Cluster(cfg, rng=np.random.default_rng(args.seed))
        reqs = [type(r)(req_id=r.req_id, arrival_s=r.arrival_s, prompt_tokens=r.prompt_tokens,
                        output_tokens=r.output_tokens, block_hashes=r.block_hashes) for r in base]
        t0 = time.perf_counter()
        cl.submit(reqs)
        cl.drain()
        wall = time.perf_counter() - t0
        ws = cl.run_stats()
        out = {"router": router, "requests": len(reqs), "prefix_hit_rate": round(ws.prefix_hit_rate, 4),
               "ttft_s": {k: round(v, 4) for k, v in ws.ttft_s.items()},
               "throughput_tok_s": round(ws.throughput_tok_s, 1), "preemptions": ws.preemptions,
               "wall_s": round(wall, 2)}
        if args.json:
            print(json.dumps(out), flush=True)
        else:
            t = out["ttft_s"]
            print(f"{router:28s} hit {out['prefix_hit_rate']:.3f}  TTFT p50 {t['p50']:.3f} p90 {t['p90']:.3f} "
                  f"p99 {t['p99']:.3f} s  {out['throughput_tok_s']:.0f} tok/s  ({out['wall_s']} s wall)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
