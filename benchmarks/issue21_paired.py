"""Paired held-out comparison of cluster policies (issue 21, fifth session): grade and p90 TTFT of
each policy on the same seeds, and every policy minus a reference (mean of per-seed differences ±
the 95 % t half-width, seeds better / worse).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_paired.py --task cluster_prefix_sharing \
        --episodes 20 --seed 1000 --ref estimated_ttft \
        --policy estimated_ttft=estimated_ttft --policy best_static_knobs=best_static_knobs \
        --policy ppo=checkpoint:ray_results/.../checkpoint_000007 [--json-out FILE]

``--policy NAME=affinity:W`` is the ``estimated_ttft_affinity`` router with weight ``W`` seconds and the
task's ``best_static_knobs`` knobs (a point of the ``best_affinity_knobs`` search grid, not a registered
rule). Besides the grade: p90 TTFT change of the means and the paired per-seed relative change ± its 95 %
half-width, seeds lower / higher, and the throughput change.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--policy", action="append", required=True, help="NAME=SPEC (registry name or checkpoint:PATH)")
    ap.add_argument("--ref", required=True, help="NAME of the reference policy (one of --policy)")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    pols = dict(p.split("=", 1) for p in args.policy)
    if args.ref not in pols:
        sys.exit(f"--ref {args.ref!r} is not one of the --policy names: {', '.join(pols)}")

    import numpy as np

    import inferencegym.rl  # noqa: F401  (registers the checkpoint: / pretrained: handlers)
    from inferencegym.evaluation.cluster import ci95, evaluate_cluster_policy

    from inferencegym.evaluation.search_cluster_knobs import _affinity_policy
    from inferencegym.policies.knob_rules import base_knobs
    from inferencegym.tasks.spec import get_task

    rows = {}
    for name, spec in pols.items():
        t = time.time()
        pol = (_affinity_policy({**base_knobs(get_task(args.task)), "affinity_s": float(spec.split(":", 1)[1])})
               if spec.startswith("affinity:") else spec)
        rows[name] = evaluate_cluster_policy(pol, args.task, episodes=args.episodes, seed=args.seed)
        rows[name]["wall_s"] = round(time.time() - t, 1)
    ref = rows[args.ref]
    out = {"command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_paired.py " + " ".join(sys.argv[1:]),
           "rows": []}
    for name, r in rows.items():
        d = np.asarray(r["scores"]) - np.asarray(ref["scores"])
        p90 = np.asarray(r["per_seed"]["ttft_p90_s"])
        rp90 = np.asarray(ref["per_seed"]["ttft_p90_s"])
        rel = p90 / rp90 - 1.0
        rec = {"policy": name, "spec": pols[name], "grade": r["score_mean"], "grade_ci95": r["score_ci95"],
               "ttft_p90_s": r["ttft_p90_s"], "throughput_tok_s": r["throughput_tok_s"],
               "minus_ref": float(d.mean()), "minus_ref_ci95": ci95(list(d)),
               "better": int((d > 0).sum()), "worse": int((d < 0).sum()),
               "p90_change_pct": float(100 * (p90.mean() / rp90.mean() - 1)),
               "p90_paired_rel_pct": float(100 * rel.mean()), "p90_paired_rel_ci95_pct": 100 * ci95(list(rel)),
               "p90_lower": int((rel < 0).sum()), "p90_higher": int((rel > 0).sum()),
               "ttft_p99_s": r["ttft_p99_s"],
               "throughput_change_pct": float(100 * (r["throughput_tok_s"] / ref["throughput_tok_s"] - 1)),
               "scores": r["scores"], "ttft_p90_per_seed": list(map(float, p90)),
               "wall_s": r["wall_s"]}
        out["rows"].append(rec)
        print(f"{name:28s} grade {rec['grade']:.4f} ± {rec['grade_ci95']:.4f}  p90 {rec['ttft_p90_s']:.3f} s  "
              f"thr {rec['throughput_tok_s']:.0f}  - {args.ref}: {rec['minus_ref']:+.4f} ± {rec['minus_ref_ci95']:.4f} "
              f"({rec['better']}/{rec['worse']}), p90 {rec['p90_change_pct']:+.1f} % (paired "
              f"{rec['p90_paired_rel_pct']:+.1f} ± {rec['p90_paired_rel_ci95_pct']:.1f} %, lower on {rec['p90_lower']}), "
              f"thr {rec['throughput_change_pct']:+.2f} %", flush=True)
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
