"""Observable variants of bursty_workload's ``phase_rule`` (issue 21, sixth session): what an
observable signal adds to the on/off forecast, each variant paired with the rule *without* the
backlog hold (``backlog_hold_requests`` = inf, the rule before this session) on the same seeds.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_bursty_variants.py 100 40 "q_hold=2" "th=0.4" ...

Arguments: first seed, episodes, then variants ``key=value,...``: ``th`` (on threshold of the
forward filter's P(on)), ``off_th`` (threshold to leave on: hysteresis), ``q_hold`` / ``run_hold``
(stay on while more than N requests are queued / running), ``q_on`` (go on when more than N are
queued), ``dwell`` (stay on at least N windows), ``off_confirm`` (leave on after N windows below the
threshold), ``off_kv`` / ``on_kv`` / ``off_split`` / ``on_split`` (table entries), ``hq`` / ``hk`` /
``hs`` (the configuration played while held: tier index, KV budget, split), ``drain_kv`` +
``drain_q`` (off with another KV budget while queue + running > N), ``giveup_q`` (the on entry in
FP16 while more than N requests are queued). Prints the mean grade, the
paired difference (± 1.96 sd / sqrt(n)) and seeds better / worse.
"""
import os
import sys
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from inferencegym.envs.serve_env import OBS_FEATURES  # noqa: E402
from inferencegym.evaluation.single import evaluate_policy  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402

I = {n: i for i, n in enumerate(OBS_FEATURES)}
task = "bursty_workload"

class Var(PhaseRulePolicy):
    def __init__(self, th=0.5, q_hold=None, q_on=None, run_hold=None, off_th=None, off_kv=None, on_kv=None, drain_kv=None, drain_q=None, off_split=None, on_split=None, dwell=None, off_confirm=None, hq=None, hk=None, hs=None, giveup_q=None):
        super().__init__(task)
        if off_kv is not None: self.by_phase["off"] = self.by_phase["off"].model_copy(update={"kv_budget_fraction": off_kv})
        if on_kv is not None: self.by_phase["on"] = self.by_phase["on"].model_copy(update={"kv_budget_fraction": on_kv})
        if off_split is not None: self.by_phase["off"] = self.by_phase["off"].model_copy(update={"prefill_decode_split": bool(off_split)})
        if on_split is not None: self.by_phase["on"] = self.by_phase["on"].model_copy(update={"prefill_decode_split": bool(on_split)})
        self.drain = None
        self.hold_cfg = None
        if hq is not None or hk is not None or hs is not None:
            upd = {}
            if hq is not None: upd["quantization_tier"] = ["FP16", "INT8", "INT4"][int(hq)]
            if hk is not None: upd["kv_budget_fraction"] = hk
            if hs is not None: upd["prefill_decode_split"] = bool(hs)
            self.hold_cfg = self.by_phase["on"].model_copy(update=upd)
        if drain_kv is not None: self.drain = self.by_phase["off"].model_copy(update={"kv_budget_fraction": drain_kv}); self.drain_q = drain_q
        self.giveup_q = giveup_q
        self.th, self.q_hold, self.q_on, self.run_hold, self.off_th = th, q_hold, q_on, run_hold, off_th
        self.cur = "off"; self.dwell = dwell; self.off_confirm = off_confirm; self.since = 0; self.low = 0
    def reset(self, seed=None):
        super().reset(seed); self.cur = "off"; self.since = 0; self.low = 0
    def act(self, obs, info=None):
        self.detector.update(obs)
        p = self.detector.p_on
        o = np.asarray(obs)
        q = float(o[I["queue_depth"]]) * 16
        r = float(o[I["running"]]) * 16
        if self.cur == "off":
            on = p > self.th or (self.q_on is not None and q > self.q_on)
        else:
            on = p > (self.off_th if self.off_th is not None else self.th)
            self.held = False
            if self.q_hold is not None and q > self.q_hold and not on: on = True; self.held = True
            if self.run_hold is not None and r > self.run_hold: on = True
        if self.cur == "on":
            self.low = self.low + 1 if not on else 0
            if self.off_confirm is not None and not on and self.low < self.off_confirm: on = True
            if self.dwell is not None and not on and self.since < self.dwell: on = True
        new = "on" if on else "off"
        self.since = self.since + 1 if new == self.cur else 1
        self.cur = new
        if self.cur == "on" and self.giveup_q is not None and q > self.giveup_q:
            return self.by_phase["on"].model_copy(update={"quantization_tier": "FP16"})
        if self.cur == "on" and getattr(self, "held", False) and self.hold_cfg is not None:
            return self.hold_cfg
        if self.cur == "off" and self.drain is not None and (q + r) > self.drain_q:
            return self.drain
        return self.by_phase[self.cur]

def parse(s):
    kw = {}
    for part in s.split(","):
        if part:
            k, v = part.split("="); kw[k] = float(v)
    return kw

seed0, n = int(sys.argv[1]), int(sys.argv[2])
base = evaluate_policy(PhaseRulePolicy(task, settings={"backlog_hold_requests": float("inf")}), task, episodes=n, seed=seed0)
b = np.array([e.score for e in base.episodes])
print("phase_rule without the hold", b.mean(), flush=True)
for spec in sys.argv[3:]:
    t = time.time()
    r = evaluate_policy(Var(**parse(spec)), task, episodes=n, seed=seed0)
    s = np.array([e.score for e in r.episodes]); d = s - b
    print(f"{spec:40s} {s.mean():.4f} diff {d.mean():+.4f} ± {1.96*d.std(ddof=1)/np.sqrt(n) if n>1 else 0:.4f} better {int((d>0).sum())} worse {int((d<0).sum())} {time.time()-t:.0f}s", flush=True)
