"""Router baselines on the cluster tasks: 20 held-out seeds, means with 95 % CIs.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/router_table.py [--episodes 20] [--seed 1000]
        [--tasks cluster_routing,...] [--policies round_robin,...] [--json out.json]

Prints a Markdown table per task (grade, p99 TTFT, p99 E2E, SLO attainment, load imbalance) and the
paired comparisons the issue asks for (least_outstanding_requests vs round_robin, clairvoyant vs
least_outstanding_requests, on p99 TTFT): mean of the per-seed differences with a 95 % t-interval and
the number of seeds on which the first policy wins. Seeds 1000.. are held out (tests and tuning use
seeds < 1000).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.evaluation.cluster import ci95, evaluate_cluster_policy  # noqa: E402
from inferencegym.tasks.cluster import CLUSTER_TASK_IDS  # noqa: E402
from inferencegym.policies.routers import ROUTER_POLICIES  # noqa: E402

PAIRS = (("least_outstanding_requests", "round_robin"), ("clairvoyant", "least_outstanding_requests"),
         # issue 21: the best observable rule, PPO and the privileged references that move knobs too
         ("best_static_knobs", "estimated_ttft"), ("ppo", "best_static_knobs"), ("ppo", "estimated_ttft"),
         ("clairvoyant+replica_best_static", "best_static_knobs"),
         ("prefix_oracle+replica_best_static", "best_static_knobs"))
"""(a, b) compared per seed on p99 and p90 TTFT and on the grade where both were run. ``ppo`` in
``--policies`` evaluates the shipped ``pretrained:TASK`` module."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--tasks", default=",".join(CLUSTER_TASK_IDS))
    ap.add_argument("--policies", default=",".join(ROUTER_POLICIES))
    ap.add_argument("--num-replicas", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write all results to this JSON file")
    args = ap.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    policies = [p for p in args.policies.split(",") if p]
    from rich.progress import Progress

    results: dict[str, dict[str, dict]] = {}
    t_start = time.perf_counter()
    with Progress(transient=True) as prog:
        bar = prog.add_task("episodes", total=len(tasks) * len(policies) * args.episodes)
        for task in tasks:
            results[task] = {}
            for pol in policies:
                spec = pol
                if pol == "ppo":
                    import inferencegym.rl  # noqa: F401  (registers the pretrained: scheme)

                    spec = f"pretrained:{task}"
                results[task][pol] = evaluate_cluster_policy(
                    spec, task, episodes=args.episodes, seed=args.seed, num_replicas=args.num_replicas,
                    progress=lambda i: prog.advance(bar))
    wall = time.perf_counter() - t_start
    cmd = "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/router_table.py " + " ".join(argv or sys.argv[1:])
    print(f"Command: `{cmd.strip()}` ({wall:.0f} s wall)\n")
    for task in tasks:
        print(f"### {task} ({args.episodes} seeds from {args.seed})\n")
        print("| router | grade | p90 TTFT (s) | p99 TTFT (s) | p99 E2E (s) | SLO attainment | "
              "load imbalance | throughput (tok/s) |")
        print("|---|---|---|---|---|---|---|---|")
        for pol in policies:
            r = results[task][pol]
            att = ", ".join(f"{k} {v:.3f}" for k, v in r["slo_attainment"].items())
            print(f"| {pol} | {r['score_mean']:.3f} ± {r['score_ci95']:.3f} | "
                  f"{r['ttft_p90_s']:.3f} ± {ci95(r['per_seed']['ttft_p90_s']):.3f} | "
                  f"{r['ttft_p99_s']:.3f} ± {r['ttft_p99_ci95']:.3f} | "
                  f"{r['e2e_p99_s']:.2f} ± {r['e2e_p99_ci95']:.2f} | {att} | {r['load_imbalance']:.3f} | "
                  f"{r['throughput_tok_s']:.0f} |")
        print()
        for a, b in PAIRS:
            if a in results[task] and b in results[task]:
                da = np.asarray(results[task][a]["per_seed"]["ttft_p99_s"])
                db = np.asarray(results[task][b]["per_seed"]["ttft_p99_s"])
                d = (da - db).tolist()
                wins = int((da < db).sum())
                ratio = float(np.mean(db) / np.mean(da)) if np.mean(da) > 0 else math.inf
                print(f"- p99 TTFT {a} - {b}: {np.mean(d):+.3f} ± {ci95(d):.3f} s "
                      f"({a} lower on {wins}/{len(d)} seeds; {b}/{a} = {ratio:.2f}x)")
                pa = np.asarray(results[task][a]["per_seed"]["ttft_p90_s"])
                pb = np.asarray(results[task][b]["per_seed"]["ttft_p90_s"])
                d90 = (pa - pb).tolist()
                print(f"- p90 TTFT {a} - {b}: {np.mean(d90):+.3f} ± {ci95(d90):.3f} s "
                      f"({100 * np.mean(d90) / np.mean(pb):+.1f} % of {b}; {a} lower on "
                      f"{int((pa < pb).sum())}/{len(d90)} seeds)")
                ga = np.asarray(results[task][a]["scores"])
                gb = np.asarray(results[task][b]["scores"])
                dg = (ga - gb).tolist()
                print(f"- grade {a} - {b}: {np.mean(dg):+.3f} ± {ci95(dg):.3f} "
                      f"({a} higher on {int((ga > gb + 1e-12).sum())}/{len(dg)} seeds)")
        print()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
