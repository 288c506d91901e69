"""Published effects of cache-aware routing, reproduced on the simulator (direction and rough size).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prefix_literature.py [--scenario llmd|sglang|all]
        [--seed 0] [--json out.json]

- **llm-d** (precise prefix-cache-aware scheduling blog, 2025): 8 vLLM replicas (Qwen-32B, TP2 on
  H100 pairs), 150 tenants each with a ~6k-token shared system prompt; p90 TTFT 0.54 s with precise
  prefix-aware routing, 31 s with the approximate index, ~95 s load-only, ~93 s random; output
  throughput 8,730 / 6,944 / 4,429 tok/s (precise / approximate / load-only). Closest preset here:
  ``codellama-34b`` (48 layers, GQA with 8 KV heads like Qwen-32B's 64 layers / 8 KV heads) on
  ``h100-80gb`` TP2; load-only = ``least_kv_load``-free queue balancing, i.e.
  ``least_outstanding_requests``.
- **SGLang** router (v0.4 blog, 2024): the cache-aware router gives up to 1.9x throughput and 3.8x
  the cache hit rate of round robin on a multi-turn shared-prefix workload. Here: 4 replicas, the
  shipped ``mooncake_shared_prefix`` generator with many prefixes, ``sglang_cache_aware`` vs
  ``round_robin``.

``scenario_requests`` and ``run_routers`` are what ``tests/sim/test_prefix_literature.py`` runs on a
scaled-down copy (fewer replicas, tenants and seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig  # noqa: E402
from inferencegym.tasks.prefix_workload import lognormal_table  # noqa: E402
from inferencegym.workload import default_prefix_spec, generate_prefix_workload  # noqa: E402

LLMD = dict(model="codellama-34b", gpu="h100-80gb", tp=2, replicas=8, tenants=150, prefix_tokens=6000,
            question_tokens=1200, output_tokens=1000, rate_rps=14.0, duration_s=300.0)
"""The llm-d benchmark's shape on the closest preset (full size)."""
LLMD_PUBLISHED = {"p90_ttft_s": {"llmd_precise": 0.54, "llmd_approx": 31.0,
                                 "least_outstanding_requests": 95.0, "random": 93.0},
                  "output_tok_s": {"llmd_precise": 8730.0, "llmd_approx": 6944.0,
                                   "least_outstanding_requests": 4429.0}}
SGLANG = dict(model="llama-2-7b", gpu="a100-80gb", tp=1, replicas=4, tenants=200, prefix_tokens=3000,
              question_tokens=200, output_tokens=150, rate_rps=14.0, duration_s=180.0)
"""A prefix-heavy shared-prompt workload for SGLang's cache-aware-vs-round-robin comparison."""
SGLANG_PUBLISHED = {"throughput_ratio": 1.9, "hit_rate_ratio": 3.8}


def scenario_requests(sc: dict, seed: int):
    """Requests of a scenario: ``tenants`` shared prompts of ``prefix_tokens`` (uniform popularity,
    each tenant's prompt first, then a unique question), Poisson at ``rate_rps``."""
    base = default_prefix_spec("mooncake_shared_prefix")
    spec = dataclasses.replace(
        base, num_prefixes=sc["tenants"], zipf_s=0.0, unique_share=0.0,
        prefix_tokens=lognormal_table(sc["prefix_tokens"], 0.0),
        first_message_tokens=lognormal_table(sc["question_tokens"], 0.3),
        output_tokens=lognormal_table(sc["output_tokens"], 0.3), turns=lognormal_table(1.0, 0.0),
        block_tokens=16).with_rate(sc["rate_rps"])
    w = generate_prefix_workload(spec, sc["duration_s"], np.random.default_rng(seed))
    return w.to_requests()


def run_routers(sc: dict, routers: list[str], seed: int = 0) -> dict[str, dict[str, float]]:
    """Each router on the same requests: p90 TTFT, output tok/s over the run, hit rate, completed."""
    out = {}
    for name in routers:
        reqs = scenario_requests(sc, seed)
        rep = ReplicaConfig(model=sc["model"], gpu=sc["gpu"], tensor_parallel=sc["tp"])
        cl = Cluster(ClusterConfig(replica=rep, num_replicas=sc["replicas"], router=name),
                     rng=np.random.default_rng(seed))
        cl.submit(reqs)
        T = sc["duration_s"]
        cl.run_until(T)
        done = [r for r in reqs if r.done]
        # TTFT of every request; one still waiting at the end counts with its wait so far
        ttft = [(r.first_token_s if r.first_token_s == r.first_token_s else T) - r.arrival_s for r in reqs]
        gen = sum(r.generated_tokens for r in reqs)
        prompt = sum(r.prompt_tokens for r in reqs if r.first_scheduled_s == r.first_scheduled_s)
        out[name] = {"p90_ttft_s": float(np.percentile(ttft, 90)), "output_tok_s": gen / T,
                     "hit_rate": sum(r.cached_tokens for r in reqs) / prompt if prompt else 0.0,
                     "completed": len(done), "requests": len(reqs)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="all", choices=("llmd", "sglang", "all"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--speed", action="store_true",
                    help="only time the full llm-d scenario per router (CPU seconds, workload generation included)")
    args = ap.parse_args(argv)
    if args.speed:
        print("| router | requests | CPU s | requests / CPU s | simulated s / CPU s |\n|---|---|---|---|---|")
        for name in ("llmd_precise", "least_outstanding_requests", "round_robin"):
            t0 = time.process_time()
            r = run_routers(LLMD, [name], args.seed)[name]
            dt = time.process_time() - t0
            print(f"| {name} | {r['requests']} | {dt:.2f} | {r['requests'] / dt:.0f} | {LLMD['duration_s'] / dt:.0f} |")
        return 0
    res = {}
    t0 = time.perf_counter()
    if args.scenario in ("llmd", "all"):
        res["llmd"] = run_routers(LLMD, ["llmd_precise", "llmd_approx", "least_outstanding_requests",
                                         "random"], args.seed)
    if args.scenario in ("sglang", "all"):
        res["sglang"] = run_routers(SGLANG, ["sglang_cache_aware", "round_robin"], args.seed)
    cmd = "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prefix_literature.py " + " ".join(argv or sys.argv[1:])
    print(f"Command: `{cmd.strip()}` ({time.perf_counter() - t0:.0f} s wall)\n")
    if "llmd" in res:
        print(f"llm-d shape on {LLMD['model']} TP{LLMD['tp']} {LLMD['gpu']} x{LLMD['replicas']}, "
              f"{LLMD['tenants']} tenants x {LLMD['prefix_tokens']}-token prefixes, {LLMD['rate_rps']} req/s\n")
        print("| router | p90 TTFT sim (s) | p90 TTFT published (s) | output tok/s sim | published | hit rate sim |")
        print("|---|---|---|---|---|---|")
        for k, v in res["llmd"].items():
            pp = LLMD_PUBLISHED["p90_ttft_s"].get(k, float("nan"))
            po = LLMD_PUBLISHED["output_tok_s"].get(k, float("nan"))
            print(f"| {k} | {v['p90_ttft_s']:.2f} | {pp} | {v['output_tok_s']:.0f} | {po:.0f} | {v['hit_rate']:.3f} |")
        print()
    if "sglang" in res:
        a, b = res["sglang"]["sglang_cache_aware"], res["sglang"]["round_robin"]
        print("| SGLang shape | cache_aware | round_robin | ratio sim | ratio published (up to) |")
        print("|---|---|---|---|---|")
        print(f"| output tok/s | {a['output_tok_s']:.0f} | {b['output_tok_s']:.0f} | "
              f"{a['output_tok_s'] / b['output_tok_s']:.2f}x | 1.9x |")
        print(f"| hit rate | {a['hit_rate']:.3f} | {b['hit_rate']:.3f} | "
              f"{a['hit_rate'] / max(b['hit_rate'], 1e-9):.2f}x | 3.8x |")
        print(f"| p90 TTFT (s) | {a['p90_ttft_s']:.2f} | {b['p90_ttft_s']:.2f} | | |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
