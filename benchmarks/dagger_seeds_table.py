"""Across training seeds: the table of several ``dagger_ablation.py`` runs that differ only in the
config seed (``--set seed=S``: the module's initial weights, minibatch order, a sampling student).

One clone's validation grade moves by a few hundredths with the training seed alone, as much as
DAgger's effect, so the comparison that counts is per training seed: for each variant, the mean
over validation episodes of (variant - BC of the same seed), then the mean of these over seeds with
a Student-t 95 % interval (n = number of seeds).

    python benchmarks/dagger_seeds_table.py benchmarks/results/dagger_ablation.json \\
        benchmarks/results/dagger_ablation_seed[1-4].json [--head 5]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy import stats


def interval(x: list[float]) -> str:
    a = np.asarray(x, float)
    if len(a) < 2:
        return f"{a.mean():+.3f}"
    half = float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a)))
    return f"{a.mean():+.3f} ± {half:.3f}"


def key(row: dict) -> tuple:
    return (row["dagger_rounds"], row.get("student", "greedy"), row.get("beta", 0.0),
            row.get("retrain", "continue"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--head", type=int, default=0, help="only the first HEAD validation seeds")
    args = ap.parse_args()
    cut = slice(None, args.head or None)
    per_seed: dict[tuple, dict[int, list[float]]] = {}
    refs: dict[str, list[float]] = {}
    seeds = []
    windows = set()
    for f in args.files:
        rec = json.loads(f.read_text())
        windows.add(rec.get("history_windows", 0))
        seed = int(next((s.split("=")[1] for s in rec["command"].split() if s.startswith("seed=")), 0))
        seeds.append(seed)
        for row in rec["rows"]:
            if "dagger_rounds" not in row:
                refs.setdefault(row["policy"], row["scores"][cut])
                continue
            per_seed.setdefault(key(row), {})[seed] = row["scores"][cut]
    bc = per_seed[(0, "greedy", 0.0, "continue")]
    n_val = len(next(iter(bc.values())))
    print(f"training seeds {sorted(seeds)}; {n_val} validation episodes each")
    for name, sc in refs.items():
        print(f"| {name} | {np.mean(sc):.3f} | | |")
    for k, by_seed in sorted(per_seed.items()):
        common = sorted(set(by_seed) & set(bc))
        means = [float(np.mean(by_seed[s])) for s in common]
        diffs = [float(np.mean(np.asarray(by_seed[s]) - np.asarray(bc[s]))) for s in common]
        vs_bs = [float(np.mean(np.asarray(by_seed[s]) - np.asarray(refs["best_static"]))) for s in common]
        label = f"BC (K={'/'.join(map(str, sorted(windows)))})" if k[0] == 0 else f"BC + DAgger {k[0]} ({k[1]}, beta {k[2]:g}, {k[3]})"
        print(f"| {label} | {np.mean(means):.3f} (per seed {', '.join(f'{m:.3f}' for m in means)}) | "
              f"{interval(diffs) if k[0] else ''} | {interval(vs_bs)} |")


if __name__ == "__main__":
    main()
