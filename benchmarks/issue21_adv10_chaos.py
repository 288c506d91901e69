"""How much per-seed spread does one deviation from ``phase_rule`` cause? (issue 21, tenth session)

The shipped adversarial module's per-seed margin over the rule has sd ~0.010-0.012 whatever class of its
deviations is removed (docs/bench/issue21.md, "Tenth session" section 2). This measures the spread of a
deviation that carries no information: ``phase_rule`` with its prefill/decode split flipped in ``--flips``
windows of the episode (windows ``--first``, ``--first + --every``, ...; the same windows on every seed),
paired with the plain rule on the same seeds. A mean near 0 with an sd near the module's would say the spread
is the episode's sensitivity to any change, not a property of the module's choices.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/issue21_adv10_chaos.py --seeds 100 200 \\
        --json-out benchmarks/results/issue21/tenth_chaos.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402

from issue21_adv10_blocks import summary  # noqa: E402
from issue21_adv_spell_eval import grade  # noqa: E402

TASK = "adversarial_multitenant"


class FlippedRule:
    """``phase_rule`` with the split flipped in the windows ``flip_at``."""

    def __init__(self, flip_at: set[int]):
        self.rule, self.flip_at = PhaseRulePolicy(TASK), flip_at

    def reset(self, seed=None):
        self.rule.reset(seed)
        self.w = 0

    def act(self, obs, info=None):
        a = self.rule.act(obs, info)
        w, self.w = self.w, self.w + 1
        return a.model_copy(update={"prefill_decode_split": not a.prefill_decode_split}) if w in self.flip_at else a


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(100, 200))
    ap.add_argument("--flips", type=int, nargs="+", default=[1, 10], help="numbers of flipped windows, one row each")
    ap.add_argument("--first", type=int, default=20)
    ap.add_argument("--every", type=int, default=17)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    if args.seeds[0] + args.seeds[1] > 1000:
        sys.exit("a diagnostic: training / validation seeds only (< 1000)")
    seeds = list(range(args.seeds[0], args.seeds[0] + args.seeds[1]))
    rule = np.asarray([grade(PhaseRulePolicy(TASK), s) for s in seeds])
    rows = []
    for n in args.flips:
        at = {args.first + i * args.every for i in range(n)}
        sc = np.asarray([grade(FlippedRule(at), s) for s in seeds])
        r = {"flips": n, "windows": sorted(at), **summary(sc - rule, seeds, 20), "scores": [float(v) for v in sc]}
        rows.append(r)
        print(f"{n:3d} flipped windows: minus rule {r['mean']:+.4f} ± {r['ci95']:.4f} ({r['better']}/{r['worse']}), "
              f"sd {r['sd']:.4f}, worst {r['worst']:+.4f}, equal on {int((sc == rule).sum())} seeds", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "benchmarks/issue21_adv10_chaos.py " + " ".join(sys.argv[1:]),
                                             "seeds": seeds, "rule_scores": [float(v) for v in rule], "rows": rows},
                                            indent=0))


if __name__ == "__main__":
    main()
