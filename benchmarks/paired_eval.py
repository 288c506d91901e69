"""Paired comparisons from `inferencegym evaluate --json` outputs (same seeds in every file).

    .venv/bin/python benchmarks/paired_eval.py AFTER.json [--ref best_static_knobs] [--before BEFORE.json]

Per policy of AFTER.json: grade (mean ± 95 % t-interval), p90 / p99 TTFT, throughput, then the paired
per-seed grade difference against ``--ref`` (a policy in the same file) and, with ``--before`` (the same
command run on an earlier tree), the paired grade and p99 TTFT move of each policy present in both files.
Differences are means of per-seed differences with 95 % t-intervals; ``k/n`` counts seeds where the first
term is higher (grade) or lower (p99 TTFT).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from inferencegym.evaluation.cluster import ci95


def _load(path: str) -> dict[str, dict]:
    try:
        with open(path) as fh:
            rows = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        sys.exit(f"error: cannot read evaluate JSON {path!r} ({exc}); expected the output of "
                 "`inferencegym evaluate ... --json`")
    return {r["policy"]: r for r in rows}


def _diff(a: list[float], b: list[float], higher: bool) -> str:
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    wins = int(np.sum(d > 0)) if higher else int(np.sum(d < 0))
    return f"{d.mean():+.4f} ± {ci95(d.tolist()):.4f} ({wins}/{d.size})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("after")
    ap.add_argument("--ref", default=None, help="policy of AFTER.json to pair every other against")
    ap.add_argument("--before", default=None, help="the same evaluation on an earlier tree")
    args = ap.parse_args()
    after = _load(args.after)
    if args.ref is not None and args.ref not in after:
        sys.exit(f"error: --ref {args.ref!r} is not in {args.after} (policies: {', '.join(after)})")
    print("| policy | grade | p90 TTFT (s) | p99 TTFT (s) | tok/s | grade - ref (paired) | p90 TTFT - ref (s, paired) | p99 TTFT - ref (s, paired) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in after.items():
        vs = vs90 = vs99 = "-"
        if args.ref is not None and name != args.ref:
            ref = after[args.ref]["per_seed"]
            vs = _diff(r["per_seed"]["score"], ref["score"], higher=True)
            vs90 = _diff(r["per_seed"]["ttft_p90_s"], ref["ttft_p90_s"], higher=False)
            vs99 = _diff(r["per_seed"]["ttft_p99_s"], ref["ttft_p99_s"], higher=False)
        print(f"| {name} | {r['score_mean']:.3f} ± {r['score_ci95']:.3f} | {r['ttft_p90_s']:.3f} | "
              f"{r['ttft_p99_s']:.3f} | {r['throughput_tok_s']:.0f} | {vs} | {vs90} | {vs99} |")
    if args.before is None:
        return
    before = _load(args.before)
    print("\n| policy | grade before -> after | paired move | p99 TTFT before -> after (s) | paired move (s) |")
    print("|---|---|---|---|---|")
    for name, r in after.items():
        b = before.get(name)
        if b is None or b["seeds"] != r["seeds"]:
            continue
        print(f"| {name} | {b['score_mean']:.3f} -> {r['score_mean']:.3f} | "
              f"{_diff(r['per_seed']['score'], b['per_seed']['score'], higher=True)} | "
              f"{b['ttft_p99_s']:.3f} -> {r['ttft_p99_s']:.3f} | "
              f"{_diff(r['per_seed']['ttft_p99_s'], b['per_seed']['ttft_p99_s'], higher=False)} |")


if __name__ == "__main__":
    main()
