"""Issue 14, item 7: the trained attention router against the production cache-aware routers.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prefix_learning.py [--task cluster_prefix_sharing]
        [--policy pretrained:cluster_prefix_sharing] [--warm-start DIR] [--episodes 20] [--seed 1000]
        [--json benchmarks/results/prefix_learning.json]

Evaluates the learned router (default: the shipped ``pretrained:TASK``, exported by
``benchmarks/train_ppo.py --export-pretrained``), optionally its warm start (the BC module directory
the run wrote, ``ray_results/<name>_bc/router_pol``), the production routers, ``estimated_ttft``
and the hindsight ``prefix_oracle`` greedily on the same held-out seeds, and prints per router the
mean p90 / p99 TTFT, output throughput and grade, then the learned router minus the best production
router (lowest mean p90 TTFT) paired per seed: mean difference with a 95 % t-interval, seeds where
the learned router is lower, and the relative change of the mean. The goal (issue 14): >= 10 % lower
p90 or p99 TTFT at equal throughput, and no worse than the warm start.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import inferencegym.rl  # noqa: E402,F401  (registers the pretrained:/checkpoint: policy schemes)
from inferencegym.evaluation.cluster import ci95, evaluate_cluster_policy  # noqa: E402
from inferencegym.policies.routers import PRODUCTION_ROUTERS  # noqa: E402
from inferencegym.rl.policy_loader import load_checkpoint  # noqa: E402

METRICS = ("ttft_p90_s", "ttft_p99_s")


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """a - b per seed: mean, 95 % t half-width, seeds where a is lower, relative change of the mean."""
    d = np.asarray(a, float) - np.asarray(b, float)
    return {"mean": float(d.mean()), "ci95": ci95(d.tolist()), "lower_on": int((d < 0).sum()), "n": len(d),
            "rel_pct": 100.0 * float(d.mean()) / float(np.mean(b))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="cluster_prefix_sharing")
    ap.add_argument("--policy", default=None, help="learned router spec [pretrained:TASK]")
    ap.add_argument("--warm-start", default=None, help="the run's BC module dir (optional row)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    learned = a.policy or f"pretrained:{a.task}"
    entries: list[tuple[str, object]] = [("learned", learned)]
    if a.warm_start:
        entries.append(("warm start (BC)", load_checkpoint(Path(a.warm_start).resolve(), a.task)))
    entries += [(r, r) for r in ("estimated_ttft", *PRODUCTION_ROUTERS, "prefix_oracle")]
    rows = {}
    t0 = time.time()
    for name, spec in entries:
        r = evaluate_cluster_policy(spec, a.task, episodes=a.episodes, seed=a.seed)
        rows[name] = {"ttft_p90_s": r["per_seed"]["ttft_p90_s"], "ttft_p99_s": r["per_seed"]["ttft_p99_s"],
                      "score": r["scores"], "throughput_tok_s": r["throughput_tok_s"]}
        print(f"{name:28s} p90 {np.mean(rows[name]['ttft_p90_s']):7.3f} s  p99 {np.mean(rows[name]['ttft_p99_s']):7.3f} s"
              f"  tok/s {r['throughput_tok_s']:7.1f}  grade {r['score_mean']:.3f}  ({time.time() - t0:.0f} s)", flush=True)
    best = min(PRODUCTION_ROUTERS, key=lambda r: np.mean(rows[r]["ttft_p90_s"]))
    out = {"task": a.task, "learned": learned, "seeds": [a.seed, a.seed + a.episodes - 1], "rows": rows,
           "best_production": best, "paired": {}}
    refs = [best, "estimated_ttft", "prefix_oracle"] + (["warm start (BC)"] if a.warm_start else [])
    for ref in refs:
        out["paired"][ref] = {m: paired(rows["learned"][m], rows[ref][m]) for m in METRICS}
        out["paired"][ref]["throughput_ratio"] = rows["learned"]["throughput_tok_s"] / rows[ref]["throughput_tok_s"]
        for m in METRICS:
            p = out["paired"][ref][m]
            print(f"learned - {ref:24s} {m}: {p['mean']:+.3f} ± {p['ci95']:.3f} s ({p['rel_pct']:+.1f}%, "
                  f"lower on {p['lower_on']}/{p['n']})")
        print(f"  throughput ratio learned / {ref}: {out['paired'][ref]['throughput_ratio']:.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
