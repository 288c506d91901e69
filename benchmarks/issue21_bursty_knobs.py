"""State-dependent knob choices on top of bursty_workload's ``phase_rule`` (issue 21, eighth session):
each variant is the shipped rule (with its backlog hold) plus per-knob thresholds on the forward
filter's P(on) or per-knob choices by load level (queued + running requests), paired with the
shipped rule on the same seeds. Training seeds (< 1000) for the search; the chosen variant alone on
validation seeds (500..); never held-out seeds here.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_bursty_knobs.py --seed 100 --episodes 80 \\
        "spec_on=1" "th_q=0.6" "load=24,spec_hi=0" ... [--json-out FILE]

Variant keys (``key=value,...``):
- ``th_q`` / ``th_s`` / ``th_k``: P(on) threshold above which the quantization / the split / the KV
  budget take the ``on`` entry's value (default: follow the rule's on/off choice, hold included);
- ``spec_on`` / ``spec_off`` / ``cap_on`` / ``cap_off`` / ``kv_on`` / ``kv_off``: table entries;
- ``load`` with ``spec_hi`` / ``cap_hi`` / ``kv_hi`` / ``q_hi`` (tier index) / ``split_hi``: above
  ``load`` queued + running requests, that knob's value instead (any phase), ``phase_hi`` = 1 / 0
  restricts it to the on / off configuration;
- ``early_p`` + ``early_load``: switch on when P(on) > early_p and more than early_load requests are
  queued + running; ``gate_load`` (+ ``gate_p``): switch on only when more than gate_load are
  queued + running (or P(on) > gate_p);
- ``leave_p`` (+ ``leave_load``): stay on while P(on) > leave_p (and more than leave_load requests
  are queued + running); ``enter_p``: switch on only when P(on) > enter_p (hysteresis);
- ``run_hold``: keep the on configuration while more than N requests run (besides the queue hold).
Prints the mean grade, the paired difference (± the project's 95 % t half-width), seeds better / worse.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from inferencegym.envs.serve_env import OBS_FEATURES  # noqa: E402
from inferencegym.evaluation.paired import paired_difference  # noqa: E402
from inferencegym.evaluation.records import write_run_record  # noqa: E402
from inferencegym.evaluation.single import evaluate_policy  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402

TASK = "bursty_workload"
_I = {n: i for i, n in enumerate(OBS_FEATURES)}
_TIERS = ("FP16", "INT8", "INT4")


class KnobVariant(PhaseRulePolicy):
    """``phase_rule`` + the per-knob overrides of the module docstring."""

    def __init__(self, **kw: float):
        super().__init__(TASK)
        self.kw = kw
        on, off = self.by_phase["on"], self.by_phase["off"]
        for ph, key in (("on", "on"), ("off", "off")):
            upd = {}
            if f"spec_{key}" in kw:
                upd["speculation_depth"] = int(kw[f"spec_{key}"])
            if f"cap_{key}" in kw:
                upd["batch_cap"] = int(kw[f"cap_{key}"])
            if f"kv_{key}" in kw:
                upd["kv_budget_fraction"] = float(kw[f"kv_{key}"])
            if upd:
                self.by_phase[ph] = self.by_phase[ph].model_copy(update=upd)
        self._on, self._off = on, off

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._holding_prev = False

    def act(self, obs, info=None):
        kw = self.kw
        name = self._hold(self.phase_forecast(obs), obs)
        o = np.asarray(obs, dtype=np.float64)
        q = float(o[_I["queue_depth"]]) * self.task.ref_batch
        r = float(o[_I["running"]]) * self.task.ref_batch
        if "run_hold" in kw and name == "off" and self._holding_prev and r > kw["run_hold"]:
            name = "on"
            self._holding_on = True
        p_on = self.detector.p_on
        if "early_p" in kw and name == "off" and p_on > kw["early_p"] and q + r > kw.get("early_load", 0.0):
            name = "on"                      # switch on earlier when the load agrees
        if "gate_load" in kw and name == "on" and not self._holding_prev and q + r <= kw["gate_load"] \
                and p_on <= kw.get("gate_p", 1.0):
            name = "off"                     # wait for the load before switching on
        if "leave_p" in kw and name == "off" and self._holding_prev and p_on > kw["leave_p"] \
                and q + r > kw.get("leave_load", -1.0):
            name = "on"                      # hysteresis: leave the burst's configuration later
        if "enter_p" in kw and name == "on" and not self._holding_prev and p_on <= kw["enter_p"]:
            name = "off"                     # hysteresis: enter it later
        self._holding_on = name == "on"
        self._holding_prev = name == "on"
        a = self.by_phase[name]
        on = self.by_phase["on"]
        p = self.detector.p_on
        upd = {}
        for key, fields in (("th_q", ("quantization_tier",)), ("th_s", ("prefill_decode_split",)),
                            ("th_k", ("kv_budget_fraction",))):
            if key in kw:
                src = on if p > kw[key] else self.by_phase["off"]
                for f in fields:
                    upd[f] = getattr(src, f)
        if "load" in kw and q + r > kw["load"] and ("phase_hi" not in kw or int(kw["phase_hi"]) == int(name == "on")):
            if "spec_hi" in kw:
                upd["speculation_depth"] = int(kw["spec_hi"])
            if "cap_hi" in kw:
                upd["batch_cap"] = int(kw["cap_hi"])
            if "kv_hi" in kw:
                upd["kv_budget_fraction"] = float(kw["kv_hi"])
            if "q_hi" in kw:
                upd["quantization_tier"] = _TIERS[int(kw["q_hi"])]
            if "split_hi" in kw:
                upd["prefill_decode_split"] = bool(kw["split_hi"])
        return a.model_copy(update=upd) if upd else a

    _holding_prev = False


def parse(spec: str) -> dict[str, float]:
    kw = {}
    for part in spec.split(","):
        if part:
            k, v = part.split("=")
            kw[k.strip()] = float(v)
    return kw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--episodes", type=int, default=80)
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    if args.seed + args.episodes > 1000:
        sys.exit("variants are searched on training / validation seeds (< 1000); held-out seeds start at 1000")
    base = np.asarray([e.score for e in evaluate_policy(PhaseRulePolicy(TASK), TASK, episodes=args.episodes,
                                                        seed=args.seed).episodes])
    print(f"phase_rule (with the hold): {base.mean():.4f}", flush=True)
    rows = [{"variant": "phase_rule", "grade": float(base.mean()), "scores": base.tolist()}]
    for spec in args.variants:
        t = time.time()
        s = np.asarray([e.score for e in evaluate_policy(KnobVariant(**parse(spec)), TASK, episodes=args.episodes,
                                                         seed=args.seed).episodes])
        q = paired_difference(s, base, tol=1e-12)
        rows.append({"variant": spec, "grade": float(s.mean()), "minus_rule": q["mean"], "minus_rule_ci95": q["ci95"],
                     "better": q["better"], "worse": q["worse"], "scores": s.tolist()})
        print(f"{spec:36s} {s.mean():.4f}  minus rule {q['mean']:+.4f} ± {q['ci95']:.4f} "
              f"({q['better']}/{q['worse']})  {time.time() - t:.0f} s", flush=True)
    if args.json_out:
        seeds = [args.seed + i for i in range(args.episodes)]
        write_run_record(args.json_out, "issue21_bursty_knobs.py", TASK, seeds, rows, indent=1)


if __name__ == "__main__":
    main()
