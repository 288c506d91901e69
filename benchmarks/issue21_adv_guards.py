"""Which of the shipped adversarial module's deviations from ``phase_rule`` pay? (issue 21, eighth session)

A *guard* replaces the module's action by the rule's in one class of deviations (the rule's phase name
x the knob the module changes), played for the whole episode; paired with the unguarded module on the
same seeds (training / validation seeds only, < 1000). A guard that raises the grade marks a class of
deviations that costs; one that lowers it, a class that pays.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_adv_guards.py --seeds 100 200 \\
        --json-out benchmarks/results/issue21/eighth_adv_guards.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from inferencegym.evaluation.cluster import ci95  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402
from inferencegym.rl.policy_loader import load_policy  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from issue21_adv10_guards import ModuleBesideTheRule  # noqa: E402
from issue21_adv_deviations import TASK, play  # noqa: E402

GUARDS = {
    "none": lambda name, ra, ma: False,
    "low+mega: keep KV 0.15": lambda name, ra, ma: name == "low+mega" and ma.kv_budget_fraction > ra.kv_budget_fraction,
    "high: no split": lambda name, ra, ma: name == "high" and ma.prefill_decode_split != ra.prefill_decode_split,
    "low: no KV 0.15": lambda name, ra, ma: name == "low" and ma.kv_budget_fraction < ra.kv_budget_fraction,
    "any: no KV 0.15 the rule does not play": lambda name, ra, ma: ma.kv_budget_fraction < ra.kv_budget_fraction,
    "low: keep split": lambda name, ra, ma: name == "low" and ma.prefill_decode_split != ra.prefill_decode_split,
    "high+mega: keep rule": lambda name, ra, ma: name == "high+mega",
}
GUARDS["low: keep split; any: no extra KV 0.15"] = lambda name, ra, ma: (
    GUARDS["low: keep split"](name, ra, ma) or GUARDS["any: no KV 0.15 the rule does not play"](name, ra, ma))


def _falling(rule: PhaseRulePolicy) -> bool:
    """The fitted sine falls at the next window (its cosine there <= 0): observable, level-2 feature 3."""
    return float(rule.detector.features(level=2)[3]) <= 0.0


OVERRIDES = {
    # the flip test (issue21_adv_flips.py): in low+mega windows with the sine falling, KV 0.9 pays
    "low+mega falling: KV 0.9": lambda rule, name, a: a.model_copy(update={"kv_budget_fraction": 0.9})
    if name == "low+mega" and _falling(rule) else a,
    "low+mega falling: KV 0.9; rising: KV 0.15": lambda rule, name, a: a.model_copy(
        update={"kv_budget_fraction": 0.9 if _falling(rule) else 0.15}) if name == "low+mega" else a,
    # one window only: the window right after the mega-prompt (the flip test's largest cell)
    "low+mega falling first window: KV 0.9": lambda rule, name, a: a.model_copy(update={"kv_budget_fraction": 0.9})
    if name == "low+mega" and _falling(rule) and float(rule.detector.features(level=2)[6]) < 0.1 else a,
}


class Guarded(ModuleBesideTheRule):
    """The module, with the rule's action where ``guard(rule phase, rule action, module action)``."""

    def __init__(self, module, guard):
        super().__init__(module)
        self.guard = guard

    def act(self, obs, info=None):
        ma, ra, name = self._actions(obs, info)
        if self.guard in OVERRIDES.values():
            return self.guard(self.rule, name, ma)
        return ra if ma != ra and self.guard(name, ra, ma) else ma


class RuleOverride(Guarded):
    """``phase_rule`` with an override of :data:`OVERRIDES` (a rule variant, no module)."""

    def __init__(self, override):
        self.guard, self.rule = override, PhaseRulePolicy(TASK)

    def reset(self, seed=None):
        self.rule.reset(seed)

    def act(self, obs, info=None):
        ra = self.rule.act(obs, info)
        return self.guard(self.rule, self.rule.detector.forecast(), ra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(100, 200))
    ap.add_argument("--guards", default=",".join(GUARDS), help="names of GUARDS / OVERRIDES, comma-separated; "
                    "'rule+NAME' plays phase_rule with override NAME; the first is the base of the pairing")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    if args.seeds[0] + args.seeds[1] > 1000:
        sys.exit("guards are chosen on training / validation seeds (< 1000)")
    seeds = range(args.seeds[0], args.seeds[0] + args.seeds[1])
    scores = {}
    for g in args.guards.split(","):
        if g.startswith("rule+"):
            pol = RuleOverride(OVERRIDES[g.removeprefix("rule+")])
        else:
            pol = Guarded(load_policy("pretrained:adversarial_multitenant", TASK), {**GUARDS, **OVERRIDES}[g])
        scores[g] = [play(pol, s, None)[0] for s in seeds]
    rule = [play(PhaseRulePolicy(TASK), s, None)[0] for s in seeds]
    base = np.asarray(scores["none"])
    out = []
    for g, sc in scores.items():
        s = np.asarray(sc)
        d, dr = s - base, s - np.asarray(rule)
        out.append({"guard": g, "mean": float(s.mean()), "minus_module": float(d.mean()), "minus_module_ci95": float(ci95(list(d))),
                    "better": int((d > 0).sum()), "worse": int((d < 0).sum()), "minus_rule": float(dr.mean()),
                    "minus_rule_ci95": float(ci95(list(dr))), "worst_minus_rule": float(dr.min()), "scores": sc})
        print(f"{g:40s} {s.mean():.4f}  - module {d.mean():+.4f} ± {ci95(list(d)):.4f} ({(d > 0).sum()}/{(d < 0).sum()})"
              f"  - rule {dr.mean():+.4f} ± {ci95(list(dr)):.4f}, worst {dr.min():+.4f}", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "benchmarks/issue21_adv_guards.py " + " ".join(sys.argv[1:]),
                                             "seeds": list(seeds), "rule_scores": rule, "rows": out}, indent=0))


if __name__ == "__main__":
    main()
