"""bursty_workload's backlog hold (issue 21, sixth session): ``phase_rule`` with
``backlog_hold_requests`` N (keep the ``on`` configuration while more than N requests are queued
after the forecast drops to ``off``) paired with the rule without the hold, on the same seeds.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_backlog_hold.py --episodes 80 --seed 100 \\
        --holds 1,2,3 [--json-out FILE]      # the search (training seeds)
    ... --episodes 20 --seed 1000 --holds 2  # held out

Each row: mean grade, the paired difference to the rule without the hold (mean ± the project's 95 %
t half-width, seeds better / worse).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from inferencegym.evaluation.paired import paired_difference  # noqa: E402
from inferencegym.evaluation.records import write_run_record  # noqa: E402
from inferencegym.evaluation.single import evaluate_policy  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402

TASK = "bursty_workload"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--holds", default="2", help="comma-separated backlog_hold_requests values")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()

    def scores(hold: float) -> list[float]:
        pol = PhaseRulePolicy(TASK, settings={"backlog_hold_requests": hold})
        r = evaluate_policy(pol, TASK, episodes=args.episodes, seed=args.seed)
        return [e.score for e in r.episodes]

    base = np.asarray(scores(math.inf))
    rows = [{"backlog_hold_requests": None, "grade": float(base.mean()), "scores": base.tolist()}]
    print(f"no hold: {base.mean():.4f}")
    for h in (float(x) for x in args.holds.split(",")):
        s = np.asarray(scores(h))
        q = paired_difference(s, base)
        rows.append({"backlog_hold_requests": h, "grade": float(s.mean()), "minus_no_hold": q["mean"],
                     "minus_no_hold_ci95": q["ci95"], "better": q["better"], "worse": q["worse"],
                     "scores": s.tolist()})
        print(f"hold {h:g}: {s.mean():.4f}, minus no hold {q['mean']:+.4f} ± {q['ci95']:.4f} "
              f"({q['better']} better / {q['worse']} worse)", flush=True)
    if args.json_out:
        seeds = [args.seed + i for i in range(args.episodes)]
        write_run_record(args.json_out, "issue21_backlog_hold.py", TASK, seeds, rows, indent=2)


if __name__ == "__main__":
    main()
