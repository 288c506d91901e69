"""The router table of ``cluster_cpu_kv`` with and without its CPU KV tier (issue 26, item 5).

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/cpu_kv_task_table.py [--episodes 20] [--seed 1000]
        [--policies round_robin,...] [--json out.json] [--from-json out.json]

Every router runs the same held-out seeds (1000..; tests and tuning use seeds < 1000) on the task as
registered (100 GB of host memory per replica for the CPU tier) and on the same task with the tier
off (``cpu_kv_gb=0``: same traffic, same GPUs, same GPU cache). Per condition and router: the
task's grade, p90 / p99 TTFT, the token-weighted prefix hit rate by tier (``prefix_hit_rate_by_tier``)
and the rank by mean grade; then paired comparisons (mean of per-seed differences with a 95 %
t-interval, scipy.stats.t): the best router of each condition against the other condition's best
router on the same condition, the privileged ``prefix_oracle`` and ``tier_oracle`` and the hindsight
selection (per seed the best router of the table, a ceiling of each by construction) against the best
observable router, and every router's gain from the tier. With ``--from-json``, routers asked for and
missing from the file are run on its seeds and merged (``--json`` writes the merged file). Routers that are not registered are skipped with a note
(``--policies`` may name rules other engineers add to ``ROUTER_POLICIES``).
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

from inferencegym.evaluation.cluster import ci95, run_cluster_episode  # noqa: E402
from inferencegym.policies.routers import PRIVILEGED_ROUTERS, ROUTER_POLICIES  # noqa: E402
from inferencegym.tasks.cluster import cluster_task  # noqa: E402
from inferencegym.tasks.cluster_grading import grade_cluster  # noqa: E402

TASK = "cluster_cpu_kv"
POLICIES = ("round_robin", "least_outstanding_requests", "estimated_ttft", "llmd_precise", "llmd_approx",
            "sglang_cache_aware", "dynamo_kv", "prefix_oracle")
METRICS = ("grade", "ttft_p90_s", "ttft_p99_s", "hit_gpu", "hit_cpu")


def conditions() -> dict[str, object]:
    """The registered task and the same task without its CPU tier."""
    task = cluster_task(TASK)
    off = dataclasses.replace(task, cluster=dataclasses.replace(task.cluster, cpu_kv_gb=0.0))
    return {f"{task.cluster.cpu_kv_gb:g} GB CPU tier": task, "no CPU tier": off}


def episode(task, policy: str, seed: int) -> dict[str, float]:
    """One episode of ``policy``: grade, TTFT tails and hit rate by tier."""
    log, stats = run_cluster_episode(task, policy, seed)
    tiers = stats["prefix_hit_rate_by_tier"]
    m = log.metrics
    return {"grade": grade_cluster(task, log).score, "ttft_p90_s": m["cluster/ttft_p90_s"],
            "ttft_p99_s": m["cluster/ttft_p99_s"], "hit_gpu": tiers["gpu"], "hit_cpu": tiers["cpu"]}


def hindsight_best(by: dict) -> list[float]:
    """Per seed, the highest grade of any router in ``by`` (a routing choice made after seeing every
    router's episode: a privileged ceiling of each of them by construction)."""
    return np.max(np.asarray([by[p]["grade"] for p in by]), axis=0).tolist()


def paired(a: list[float], b: list[float]) -> str:
    d = (np.asarray(a) - np.asarray(b)).tolist()
    wins = int(sum(x > y for x, y in zip(a, b)))
    return f"{np.mean(d):+.3f} ± {ci95(d):.3f} (higher on {wins}/{len(d)} seeds)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--json", default=None, help="also write all per-seed results to this JSON file")
    ap.add_argument("--from-json", default=None, help="print the tables of a run's JSON file instead")
    args = ap.parse_args(argv)
    asked = [p for p in args.policies.split(",") if p]
    policies = [p for p in asked if p in ROUTER_POLICIES]
    for p in asked:
        if p not in ROUTER_POLICIES:
            print(f"# skipped {p!r}: not a registered router policy", file=sys.stderr)
    seeds = [args.seed + i for i in range(args.episodes)]
    t0, c0 = time.perf_counter(), time.process_time()
    if args.from_json:  # the tables of an earlier run; routers asked for and missing there are run
        with open(args.from_json) as fh:
            res = json.load(fh)
        n_old = min(len(v["grade"]) for by in res.values() for v in by.values())
        seeds = [args.seed + i for i in range(n_old)]
        todo = [p for p in policies if not all(p in by for by in res.values())]
    else:
        res = {cond: {} for cond in conditions()}
        todo = policies
    if todo:
        for by in res.values():
            for pol in todo:
                by[pol] = {k: [] for k in METRICS}
        # seed-major: a run stopped early still holds every router on the same seeds (paired)
        for s in seeds:
            for cond, task in conditions().items():
                for pol in todo:
                    e = episode(task, pol, s)
                    for k in METRICS:
                        res[cond][pol][k].append(e[k])
            print(f"# seed {s} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
            if args.json:  # after every seed, so a long run's finished part is kept
                with open(args.json, "w") as fh:
                    json.dump(res, fh, indent=1)
    n_seeds = min(len(v["grade"]) for by in res.values() for v in by.values())
    policies = [p for p in policies if all(p in by for by in res.values())]
    cmd = "OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/cpu_kv_task_table.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    print(f"Command: `{cmd.strip()}` ({time.perf_counter() - t0:.0f} s wall, "
          f"{time.process_time() - c0:.0f} CPU s)\n")
    best: dict[str, str] = {}
    for cond, by in res.items():
        observable = [p for p in by if p not in PRIVILEGED_ROUTERS]
        order = sorted(observable, key=lambda p: -np.mean(by[p]["grade"]))
        best[cond] = order[0] if order else ""
        print(f"### {TASK}, {cond} ({n_seeds} seeds from {args.seed})\n")
        print("| router | rank | grade | p90 TTFT (s) | p99 TTFT (s) | hit rate GPU | hit rate CPU |")
        print("|---|---|---|---|---|---|---|")
        for pol in by:
            r = by[pol]
            rank = str(order.index(pol) + 1) if pol in order else "(privileged)"
            print(f"| {pol} | {rank} | {np.mean(r['grade']):.3f} ± {ci95(r['grade']):.3f} | "
                  f"{np.mean(r['ttft_p90_s']):.2f} ± {ci95(r['ttft_p90_s']):.2f} | "
                  f"{np.mean(r['ttft_p99_s']):.2f} ± {ci95(r['ttft_p99_s']):.2f} | "
                  f"{np.mean(r['hit_gpu']):.3f} | {np.mean(r['hit_cpu']):.3f} |")
        print()
        for ref in ("prefix_oracle", "tier_oracle"):
            if ref in by and best[cond]:
                print(f"- grade, {ref} - {best[cond]} (best observable): "
                      f"{paired(by[ref]['grade'], by[best[cond]]['grade'])}")
        if best[cond]:
            hind = hindsight_best(by)
            print(f"- grade, hindsight_best (privileged: per seed, the best of the {len(by)} routers "
                  f"above, chosen after the episode) = {np.mean(hind):.3f} ± {ci95(hind):.3f}; "
                  f"- {best[cond]}: {paired(hind, by[best[cond]]['grade'])}")
    conds = list(res)
    if len(conds) == 2 and all(best.values()):
        for cond in conds:
            other = best[conds[1] if cond == conds[0] else conds[0]]
            if other != best[cond]:
                print(f"- {cond}: grade, {best[cond]} - {other} (the other condition's best): "
                      f"{paired(res[cond][best[cond]]['grade'], res[cond][other]['grade'])}")
        for pol in policies:
            print(f"- grade gain from the tier, {pol}: "
                  f"{paired(res[conds[0]][pol]['grade'], res[conds[1]][pol]['grade'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
