"""The difficulty table: every baseline on every single-agent task over held-out seeds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/difficulty_table.py --episodes 20 --seed 1000 [--json]

Seeds 1000.. are disjoint from the search seeds of best_static / clairvoyant (0..N-1). Prints a
Markdown table (mean grade +- 95 % CI), the clairvoyant's paired margin over best_static per
task, and checks the expected ordering:
random < static_default < heuristic <= best_static on every task; on adversarial_multitenant
clairvoyant >= best_static + 0.10; on static_workload |clairvoyant - best_static| <= 0.03.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from scipy import stats

from inferencegym.envs import list_tasks
from inferencegym.evaluation.single import evaluate_policy

POLICIES = ("random", "static_default", "heuristic", "best_static", "clairvoyant")


def paired_margin(a: list[float], b: list[float]) -> tuple[float, float, int]:
    """Mean of a - b over the same seeds, its Student-t 95 % half-width, and how many seeds a > b."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    ci = float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    return float(d.mean()), ci, int((d > 0).sum())


def checks(table: dict[str, dict[str, float]]) -> list[tuple[str, bool]]:
    out = []
    for task, s in table.items():
        out.append((f"{task}: random < static_default < heuristic <= best_static",
                    s["random"] < s["static_default"] < s["heuristic"] <= s["best_static"]))
    if "adversarial_multitenant" in table:
        s = table["adversarial_multitenant"]
        out.append(("adversarial_multitenant: clairvoyant >= best_static + 0.10",
                    s["clairvoyant"] >= s["best_static"] + 0.10))
    if "static_workload" in table:
        s = table["static_workload"]
        out.append(("static_workload: |clairvoyant - best_static| <= 0.03",
                    abs(s["clairvoyant"] - s["best_static"]) <= 0.03))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tasks = [t.task_id for t in list_tasks(kind="single")] if args.tasks == "all" else args.tasks.split(",")
    table: dict[str, dict[str, float]] = {}
    rows = []
    from rich.progress import Progress

    with Progress(transient=True) as prog:
        bar = prog.add_task("difficulty table", total=len(tasks) * len(POLICIES) * args.episodes)
        for t in tasks:
            table[t] = {}
            for p in POLICIES:
                res = evaluate_policy(p, t, episodes=args.episodes, seed=args.seed,
                                      on_episode=lambda ep: prog.advance(bar))
                d = res.to_json_dict()
                rows.append(d)
                table[t][p] = d["score_mean"]
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"| task | {' | '.join(POLICIES)} |")
        print(f"|---|{'---|' * len(POLICIES)}")
        by = {(r["task"], r["policy"]): r for r in rows}
        for t in tasks:
            cells = [f"{by[(t, p)]['score_mean']:.3f} ± {by[(t, p)]['score_ci95']:.3f}" for p in POLICIES]
            print(f"| {t} | {' | '.join(cells)} |")
        print()
        for t in tasks:
            d, ci, k = paired_margin(by[(t, "clairvoyant")]["scores"], by[(t, "best_static")]["scores"])
            print(f"{t}: clairvoyant - best_static, paired per seed: {d:+.3f} ± {ci:.3f} "
                  f"(clairvoyant higher on {k}/{len(by[(t, 'best_static')]['scores'])} seeds)")
        print()
    ok = True
    for name, passed in checks(table):
        print(f"{'PASS' if passed else 'FAIL'}  {name}", file=sys.stderr if args.json else sys.stdout)
        ok &= passed
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
