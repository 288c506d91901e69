"""Actor specs of the adversarial_multitenant scripts (issue 21, ninth and tenth sessions): one string names a
policy to play, label with or distil from, so every script (``issue21_adv_spell_eval.py``,
``issue21_adv_spells.py``, ``issue21_adv_spell_distill.py``, ``issue21_adv10b_*``) takes the same ``--policy`` /
``--actor`` / ``--teacher`` values. The policies live in their own scripts; this module only dispatches
(so those scripts import nothing from it and nothing circles back)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402
from inferencegym.rl.advantage_fit import AdvantageModel  # noqa: E402
from inferencegym.rl.policy_loader import load_policy  # noqa: E402
from issue21_adv_spell_policy import TASK, SpellPolicy  # noqa: E402

__all__ = ["TASK", "make_actor"]


def make_actor(spec: str):
    """``spell:MODEL.pt@MARGIN[@MODE]`` -> :class:`SpellPolicy` on the shipped module; ``risk:MODEL.pt@MARGIN[@MIN_LOW]``
    -> ``issue21_adv10_risk.RiskSpellPolicy`` on it; ``guard:ls+hm`` -> ``issue21_adv10_guards.KnobGuard`` on it;
    ``export:DIR`` -> an
    exported module; ``phase_rule``; else a ``load_policy`` spec."""
    if spec.startswith("spell:"):
        path, _, rest = spec.removeprefix("spell:").partition("@")
        margin, _, mode = rest.partition("@")
        try:
            margin_f = float(margin)
        except ValueError:
            raise ValueError(f"spell spec {spec!r}: expected spell:MODEL.pt@MARGIN[@MODE] with a number as "
                             f"MARGIN, e.g. spell:benchmarks/results/issue21/ninth_spell_r0.pt@0.1") from None
        if not Path(path).is_file():
            raise ValueError(f"spell spec {spec!r}: no regressor file {path!r} (fit one with "
                             f"`issue21_adv_spell_policy.py fit`)")
        return SpellPolicy(load_policy("pretrained:adversarial_multitenant", TASK), AdvantageModel.load(path),
                           margin_f, mode or "replace")
    if spec.startswith("risk:"):  # the tenth session's risk-gated guard (issue21_adv10_risk.py)
        from issue21_adv10_risk import make_risk_actor

        return make_risk_actor(spec, load_policy("pretrained:adversarial_multitenant", TASK))
    if spec.startswith(("allknob:", "nb:", "gbm:")):  # the tenth session (b)'s all-knob advantage policy (issue21_adv10b_allknob.py)
        from issue21_adv10b_allknob import make_allknob_actor

        return make_allknob_actor(spec, load_policy("pretrained:adversarial_multitenant", TASK))
    if spec.startswith("knob:"):  # tenth session (b): knobs set per forecast phase (issue21_adv10b_allknob.py)
        from issue21_adv10b_allknob import KnobOverride

        return KnobOverride(load_policy("pretrained:adversarial_multitenant", TASK), spec)
    if spec.startswith("guard:"):  # the tenth session's module with deviation classes removed (issue21_adv10_guards.py)
        from issue21_adv10_guards import KnobGuard

        return KnobGuard(load_policy("pretrained:adversarial_multitenant", TASK), spec.removeprefix("guard:").split("+"))
    if spec == "phase_rule":
        return PhaseRulePolicy(TASK)
    if spec.startswith("export:"):  # a module written by issue21_adv_spell_distill.py (export_module format)
        from inferencegym.rl.policy_loader import load_exported

        path = spec.removeprefix("export:")
        if not (Path(path) / "module.json").is_file():
            raise ValueError(f"export spec {spec!r}: no module.json in {path!r} (a directory written by "
                             f"issue21_adv_spell_distill.py, e.g. ray_results/adv_spell_student/r2)")
        return load_exported(path, TASK)
    return load_policy(spec, TASK)
