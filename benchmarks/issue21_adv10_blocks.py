"""Per-block paired lower bounds of ``issue21_adv_spell_eval.py`` records (issue 21, tenth session).

The hidden checks grade a policy against ``phase_rule`` on 20-seed draws: what matters is whether the paired
95 % lower bound is above 0 on *any* such block. For each row of one or more records (same policy names), the
per-seed differences minus ``--base`` (default ``phase_rule``) are cut into consecutive blocks of ``--block``
seeds; printed: the pooled mean ± 95 %, sd, worst seed, the number of blocks whose lower bound (mean - half-width)
is above 0, the smallest lower bound, the expected 20-seed lower bound (mean - t(19) sd / sqrt(20)), and with
``--draws N`` the share of N random 20-seed draws from the pooled seeds whose lower bound is above 0 (the chance
that a hidden 20-seed check passes, if its seeds behave like these).

    .venv/bin/python benchmarks/issue21_adv10_blocks.py benchmarks/results/issue21/tenth_fresh2000.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from inferencegym.evaluation.paired import ci95  # noqa: E402


def blocks(d: np.ndarray, size: int) -> list[float]:
    """Lower bounds (mean - 95 % half-width) of consecutive blocks of ``size`` differences."""
    return [float(d[i:i + size].mean() - ci95(list(d[i:i + size]))) for i in range(0, len(d) - size + 1, size)]


def draws_passing(d: np.ndarray, size: int, draws: int, seed: int = 0) -> float:
    """Share of ``draws`` random ``size``-seed subsets (without replacement) whose lower bound is above 0."""
    rng = np.random.default_rng(seed)
    sub = np.stack([rng.choice(len(d), size, replace=False) for _ in range(draws)])
    x = d[sub]
    lb = x.mean(axis=1) - 2.093 * x.std(axis=1, ddof=1) / math.sqrt(size) if size == 20 else None
    if lb is None:
        lb = np.asarray([r.mean() - ci95(list(r)) for r in x])
    return float((lb > 0).mean())


def summary(d: np.ndarray, seeds: list[int], size: int, draws: int = 0) -> dict:
    lbs = blocks(d, size)
    t19 = 2.093   # scipy.stats.t.ppf(0.975, 19)
    return {"mean": float(d.mean()), "ci95": ci95(list(d)), "sd": float(d.std(ddof=1)), "median": float(np.median(d)),
            "better": int((d > 0).sum()), "worse": int((d < 0).sum()), "worst": float(d.min()),
            "worst_seed": int(seeds[int(d.argmin())]), "blocks": len(lbs),
            "blocks_lb_above_0": int(sum(lb > 0 for lb in lbs)), "min_block_lb": float(min(lbs)) if lbs else math.nan,
            "block_lbs": lbs, "expected_lb20": float(d.mean() - t19 * d.std(ddof=1) / math.sqrt(20)),
            **({"random_draws": draws, "random_draws_lb_above_0": draws_passing(d, size, draws)} if draws else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", type=Path, nargs="+", help="issue21_adv_spell_eval.py JSONs (concatenated in order)")
    ap.add_argument("--base", default="phase_rule")
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--draws", type=int, default=0, help="also: the share of this many random --block-seed draws "
                    "(without replacement, numpy seed 0) whose lower bound is above 0")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    seeds: list[int] = []
    scores: dict[str, list[float]] = {}
    for p in args.records:
        rec = json.loads(p.read_text())
        n0 = len(seeds)
        seeds += rec["seeds"]
        for r in rec["rows"]:
            got = scores.setdefault(r["name"], [])
            if len(got) != n0:
                sys.exit(f"{p}: row {r['name']!r} is missing from an earlier record")
            got += r["scores"]
    if args.base not in scores:
        sys.exit(f"no row {args.base!r}; rows: {sorted(scores)}")
    base = np.asarray(scores[args.base])
    out = {"records": [str(p) for p in args.records], "seeds": [seeds[0], seeds[-1]], "n": len(seeds),
           "base": args.base, "rows": {}}
    for name, s in scores.items():
        if name == args.base or len(s) != len(seeds):
            continue
        r = out["rows"][name] = summary(np.asarray(s) - base, seeds, args.block, args.draws)
        print(f"{name:24s} minus {args.base}: {r['mean']:+.4f} ± {r['ci95']:.4f} ({r['better']}/{r['worse']}) sd {r['sd']:.4f} "
              f"worst {r['worst']:+.4f} (seed {r['worst_seed']}) | blocks of {args.block} with lb > 0: "
              f"{r['blocks_lb_above_0']}/{r['blocks']}, min lb {r['min_block_lb']:+.4f}, expected lb20 {r['expected_lb20']:+.4f}"
              + (f", random draws with lb > 0: {r['random_draws_lb_above_0']:.1%}" if args.draws else ""))
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
