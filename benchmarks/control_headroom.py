"""Headroom table of the control-plane tasks: every controller, the hindsight ceiling, and the gap
from the best controller to the ceiling (paired over the same held-out days and seeds).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/control_headroom.py \
        --task cluster_autoscaling --episodes 4 --out benchmarks/results/control_headroom.json

Prints a Markdown table (score, GPU-hours, SLO attainment, mean ± 95 % t-interval over episodes)
and the paired gap ceiling - best controller (mean of per-episode differences ± 95 % t-interval).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from inferencegym.evaluation.control import ci95, evaluate_control

AUTOSCALING = ["hpa", "kpa", "wva", "dynamo_planner", "scheduled", "hindsight"]
ADMISSION = ["admit_all", "token_bucket", "gaie_shed"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="cluster_autoscaling")
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--split", default="test")
    ap.add_argument("--failures", action="store_true")
    ap.add_argument("--policies", default=None, help="comma-separated (default: every baseline)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--merge", default=None, help="comma-separated JSON outputs of earlier runs: table only")
    a = ap.parse_args()
    if a.merge:
        rows = [r for f in a.merge.split(",") for r in json.loads(Path(f).read_text())["rows"]]
    else:
        pols = a.policies.split(",") if a.policies else (AUTOSCALING if a.task == "cluster_autoscaling"
                                                          else ADMISSION)
        rows = []
        for p in pols:
            r = evaluate_control(p, a.task, episodes=a.episodes, seed=a.seed, split=a.split, failures=a.failures)
            rows.append(r)
            print(f"{p}: score {r['score_mean']:.3f} ± {r['score_ci95']:.3f}, GPU-h {r['gpu_hours']:.1f}, "
                  f"SLO {r['slo_attainment']:.3f}, cpu/episode {r['cpu_s_per_episode']:.1f} s", flush=True)
    print("\n| policy | score | GPU-hours | SLO attainment | tier SLO | tier p90 TTFT s |")
    print("|---|---:|---:|---:|---|---|")
    for r in rows:
        ts = ", ".join(f"{k} {v:.3f}" for k, v in r["tier_slo_attainment"].items())
        tt = ", ".join(f"{k} {v:.2f}" for k, v in r["tier_ttft_p90_s"].items())
        sl = [e["slo_attainment"] for e in r["episodes_detail"]]
        print(f"| {r['policy']} | {r['score_mean']:.3f} ± {r['score_ci95']:.3f} | {r['gpu_hours']:.1f} ± "
              f"{r['gpu_hours_ci95']:.1f} | {r['slo_attainment']:.3f} ± {ci95(sl):.3f} | {ts} | {tt} |")
    ceil = next((r for r in rows if r["policy"] == "hindsight"), None)
    rules = [r for r in rows if r["policy"] != "hindsight"]
    best = max(rules, key=lambda r: r["score_mean"])
    gap = None
    if ceil is not None:
        d = [c["score"] - b["score"] for c, b in zip(ceil["episodes_detail"], best["episodes_detail"])]
        gap = {"best": best["policy"], "gap_mean": float(np.mean(d)), "gap_ci95": ci95(d),
               "wins": int(sum(x > 0 for x in d)), "episodes": len(d)}
        print(f"\ngap hindsight - {best['policy']}: {gap['gap_mean']:+.3f} ± {gap['gap_ci95']:.3f} "
              f"(paired, {gap['wins']}/{len(d)} episodes)")
    else:
        print(f"\nbest controller: {best['policy']}")
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"args": vars(a), "rows": rows, "gap": gap},
                                  default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else x))
        tmp.replace(out)


if __name__ == "__main__":
    main()
