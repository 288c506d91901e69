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

import inferencegym.rl  # noqa: F401  (registers pretrained: / checkpoint: for learned controllers)
from inferencegym.evaluation.control import ci95, evaluate_control

AUTOSCALING = ["hpa", "kpa", "wva", "dynamo_planner", "scheduled", "hindsight"]
ADMISSION = ["admit_all", "token_bucket", "gaie_shed", "hindsight_admission"]
CEILINGS = ("hindsight", "hindsight_admission")


def paired(a: dict, b: dict) -> dict:
    """Paired differences a - b over the episodes both ran (same day and seed): score, SLO attainment, critical-tier SLO
    and p90 TTFT, and GPU-hours in percent of b's."""
    ka = {(e["day"], e["seed"]): e for e in a["episodes_detail"]}
    kb = {(e["day"], e["seed"]): e for e in b["episodes_detail"]}
    common = [k for k in ka if k in kb]  # a merged run may hold more seeds of one policy than another
    if not common:
        raise ValueError(f"{a['policy']} and {b['policy']} share no episode: not paired")
    ea, eb = [ka[k] for k in common], [kb[k] for k in common]
    out = {"vs": b["policy"]}
    series = {"score": lambda e: e["score"], "slo_attainment": lambda e: e["slo_attainment"],
              "gpu_hours": lambda e: e["gpu_hours"]}
    if "critical" in ea[0]["tier_slo_attainment"]:
        series["critical_slo"] = lambda e: e["tier_slo_attainment"]["critical"]
        series["critical_ttft_p90_s"] = lambda e: e["tier_ttft_p90_s"]["critical"]
        series["standard_slo"] = lambda e: e["tier_slo_attainment"]["standard"]
    for k, f in series.items():
        d = [f(x) - f(y) for x, y in zip(ea, eb)]
        out[k] = float(np.mean(d))
        out[k + "_ci95"] = ci95(d)
    gh = [(x["gpu_hours"] - y["gpu_hours"]) / y["gpu_hours"] * 100 for x, y in zip(ea, eb) if y["gpu_hours"] > 0]
    out["gpu_hours_pct"], out["gpu_hours_pct_ci95"] = (float(np.mean(gh)), ci95(gh)) if gh else (0.0, 0.0)
    out["score_wins"] = int(sum(x["score"] > y["score"] for x, y in zip(ea, eb)))
    out["episodes"] = len(ea)
    return out


def combine(rows: list[dict]) -> list[dict]:
    """Rows of the same policy (runs over different seeds) as one row: episodes concatenated in
    file order, means and intervals recomputed from the per-episode values."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["policy"] not in out:
            out[r["policy"]] = {**r, "episodes_detail": list(r["episodes_detail"])}
            continue
        c = out[r["policy"]]
        seen = {(e["day"], e["seed"]) for e in c["episodes_detail"]}
        c["episodes_detail"] += [e for e in r["episodes_detail"] if (e["day"], e["seed"]) not in seen]
    for c in out.values():
        eps = c["episodes_detail"]
        c["episodes"] = len(eps)
        for k in ("score", "gpu_hours", "slo_attainment"):
            v = [e[k] for e in eps]
            c[k + "_mean" if k == "score" else k] = float(np.mean(v))
            c[k + "_ci95"] = ci95(v)
        for key in ("tier_slo_attainment", "tier_ttft_p90_s"):
            c[key] = {t: float(np.nanmean([e[key][t] for e in eps if t in e[key]])) for t in eps[0][key]}
    return list(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="cluster_autoscaling")
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--split", default="test")
    ap.add_argument("--failures", action="store_true")
    ap.add_argument("--load-windows", default=None, help="another ServeGen *__windows.parquet file (its own day split)")
    ap.add_argument("--policies", default=None, help="comma-separated (default: every baseline)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--merge", default=None, help="comma-separated JSON outputs of earlier runs: table only "
                    "(runs of the same policy over other seeds are concatenated into one row)")
    ap.add_argument("--alias", default=None, help="with --merge: comma-separated SPEC=NAME, rows of SPEC read as NAME "
                    "(one module run under two specs, e.g. before and after it was installed as pretrained:)")
    a = ap.parse_args()
    if a.merge:
        alias = dict(kv.split("=", 1) for kv in a.alias.split(",")) if a.alias else {}
        rows = combine([{**r, "policy": alias.get(r["policy"], r["policy"])} for f in a.merge.split(",")
                        for r in json.loads(Path(f).read_text())["rows"]])
    else:
        pols = a.policies.split(",") if a.policies else (AUTOSCALING if a.task == "cluster_autoscaling"
                                                          else ADMISSION)
        rows = []
        for p in pols:
            r = evaluate_control(p, a.task, episodes=a.episodes, seed=a.seed, split=a.split, failures=a.failures,
                                 load_windows_path=a.load_windows)
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
    ceil = next((r for r in rows if r["policy"] in CEILINGS), None)
    learned = [r for r in rows if ":" in r["policy"]]
    rules = [r for r in rows if r["policy"] not in CEILINGS and r not in learned]
    best = max(rules, key=lambda r: r["score_mean"]) if rules else None
    gap = None
    if ceil is not None and best is not None:
        d = [c["score"] - b["score"] for c, b in zip(ceil["episodes_detail"], best["episodes_detail"])]
        gap = {"best": best["policy"], "gap_mean": float(np.mean(d)), "gap_ci95": ci95(d),
               "wins": int(sum(x > 0 for x in d)), "episodes": len(d)}
        print(f"\ngap {ceil['policy']} - {best['policy']}: {gap['gap_mean']:+.3f} ± {gap['gap_ci95']:.3f} "
              f"(paired, {gap['wins']}/{len(d)} episodes)")
    elif best is not None:
        print(f"\nbest controller: {best['policy']}")
    comparisons = []
    for lr in learned:
        print(f"\npaired: {lr['policy']} minus each controller ({len(lr['episodes_detail'])} episodes, "
              f"mean ± 95 % t-interval)")
        print("| vs | score | GPU-hours % | SLO attainment | critical SLO | critical p90 TTFT s | score wins |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r is lr:
                continue
            c = paired(lr, r)
            comparisons.append({"policy": lr["policy"], **c})
            crit = (f"{c['critical_slo']:+.3f} ± {c['critical_slo_ci95']:.3f} | {c['critical_ttft_p90_s']:+.2f} ± "
                    f"{c['critical_ttft_p90_s_ci95']:.2f}") if "critical_slo" in c else "- | -"
            print(f"| {r['policy']} | {c['score']:+.3f} ± {c['score_ci95']:.3f} | {c['gpu_hours_pct']:+.1f} ± "
                  f"{c['gpu_hours_pct_ci95']:.1f} | {c['slo_attainment']:+.3f} ± {c['slo_attainment_ci95']:.3f} | "
                  f"{crit} | {c['score_wins']}/{c['episodes']} |")
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"args": vars(a), "rows": rows, "gap": gap, "paired": comparisons},
                                  default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else x))
        tmp.replace(out)


if __name__ == "__main__":
    main()
