"""Headroom on the prefix-sharing cluster tasks: baselines, production routers and the hindsight oracle.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prefix_router_table.py [--episodes 20] [--seed 1000]
        [--tasks cluster_prefix_sharing,cluster_multiturn] [--policies ...] [--json out.json]

Per task and router, over held-out seeds 1000.. (tests and tuning use seeds < 1000): p90 and p99
TTFT, output throughput, token-weighted prefix hit rate and the task's grade (means with 95 %
t-intervals), then the paired comparison of ``prefix_oracle`` with the best production router
(lowest mean p90 TTFT among llm-d precise/approximate, SGLang cache-aware, Dynamo KV): mean of the
per-seed differences with a 95 % t-interval (scipy.stats.t) and the relative gap.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.envs.cluster_env import ClusterEnv  # noqa: E402
from inferencegym.evaluation.cluster import ci95  # noqa: E402
from inferencegym.policies.routers import PRODUCTION_ROUTERS, get_cluster_policy  # noqa: E402
from inferencegym.tasks.cluster import PREFIX_TASK_IDS  # noqa: E402
from inferencegym.tasks.cluster_grading import grade_cluster  # noqa: E402

POLICIES = ("random", "round_robin", "least_outstanding_requests", "estimated_ttft",
            *PRODUCTION_ROUTERS, "prefix_oracle")
METRICS = ("ttft_p90_s", "ttft_p99_s", "throughput_tok_s", "hit_rate", "grade")


def episode(task_id: str, policy: str, seed: int) -> dict[str, float]:
    """One episode of ``policy`` on ``task_id``: the table's metrics."""
    pol = get_cluster_policy(policy)
    env = ClusterEnv({"task_id": task_id})
    pol.bind(env)
    pol.reset(seed)
    obs, infos = env.reset(seed=seed)
    while True:
        obs, _, term, trunc, infos = env.step(pol.act_all(obs, infos))
        if term["__all__"] or trunc["__all__"]:
            break
    log = env.episode_log(policy=policy, seed=seed)
    m = log.metrics
    served = [r for r in env.requests if r.first_token_s == r.first_token_s]
    prompt = sum(r.prompt_tokens for r in served)
    return {"ttft_p90_s": m["cluster/ttft_p90_s"], "ttft_p99_s": m["cluster/ttft_p99_s"],
            "throughput_tok_s": m["cluster/throughput_tok_s"],
            "hit_rate": sum(r.cached_tokens for r in served) / prompt if prompt else 0.0,
            "grade": grade_cluster(task_id, log).score}


def paired(a: list[float], b: list[float]) -> tuple[float, float, int]:
    d = (np.asarray(a) - np.asarray(b)).tolist()
    return float(np.mean(d)), ci95(d), int(sum(x < y for x, y in zip(a, b)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--tasks", default=",".join(PREFIX_TASK_IDS))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--json", default=None, help="also write all per-seed results to this JSON file")
    args = ap.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    policies = [p for p in args.policies.split(",") if p]
    seeds = [args.seed + i for i in range(args.episodes)]
    t0 = time.perf_counter()
    res: dict[str, dict[str, dict[str, list[float]]]] = {}
    for task in tasks:
        res[task] = {}
        for pol in policies:
            eps = [episode(task, pol, s) for s in seeds]
            res[task][pol] = {k: [e[k] for e in eps] for k in METRICS}
            print(f"# {task} {pol} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    cmd = "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prefix_router_table.py " + " ".join(argv or sys.argv[1:])
    print(f"Command: `{cmd.strip()}` ({time.perf_counter() - t0:.0f} s wall)\n")
    for task in tasks:
        print(f"### {task} ({args.episodes} seeds from {args.seed})\n")
        print("| router | p90 TTFT (s) | p99 TTFT (s) | output tok/s | prefix hit rate | grade |")
        print("|---|---|---|---|---|---|")
        for pol in policies:
            r = res[task][pol]
            cells = [f"{np.mean(r[k]):.3f} ± {ci95(r[k]):.3f}" for k in ("ttft_p90_s", "ttft_p99_s")]
            cells += [f"{np.mean(r['throughput_tok_s']):.0f}", f"{np.mean(r['hit_rate']):.3f}",
                      f"{np.mean(r['grade']):.3f} ± {ci95(r['grade']):.3f}"]
            print(f"| {pol} | " + " | ".join(cells) + " |")
        prod = [p for p in PRODUCTION_ROUTERS if p in res[task]]
        if prod and "prefix_oracle" in res[task]:
            best = min(prod, key=lambda p: np.mean(res[task][p]["ttft_p90_s"]))
            for q in ("ttft_p90_s", "ttft_p99_s"):
                o, b = res[task]["prefix_oracle"][q], res[task][best][q]
                m, h, wins = paired(o, b)
                gap = 1.0 - np.mean(o) / np.mean(b)
                print(f"\n- {q}: prefix_oracle - {best} (best production router) = {m:+.3f} ± {h:.3f} s "
                      f"(oracle lower on {wins}/{len(o)} seeds; gap {100 * gap:.1f} %)")
        print()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
