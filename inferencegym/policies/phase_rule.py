"""``phase_rule``: the best observable rule of the phased single-agent tasks (issue 21).

The hidden phase of ``bursty_workload`` (Markov on/off) and ``adversarial_multitenant`` (a 60-s
sinusoid with mega-prompts in its quiet half) is not in the observation, but the task's *public*
workload spec (``TaskSpec.workload``: rates, period, amplitude, on/off means, prompt clip) says how
it shapes the arrivals the observation does show. The rule forecasts the next window's phase from
the observation history and applies a per-phase configuration table:

- ``sinusoidal``: maximum-likelihood phase offset of the published sinusoid given the (mega-free)
  arrival counts seen so far (Poisson log-likelihood on a grid of offsets), evaluated at the next
  window's middle (plus ``lead_windows``); ``high`` when its sine exceeds the task's threshold plus
  ``threshold_shift``. A window whose mean prompt exceeds the prompt clip held a mega-prompt (the
  only prompts above the clip): ``+mega`` while one arrived in the last ``mega_hold_windows``.
- ``onoff``: a forward filter of the two-state Markov chain (exponential ON/OFF periods with the
  published means, Poisson arrivals at the published rates), predicted one window ahead; ``on`` when
  the probability exceeds ``on_threshold``.
- any other process: one phase (``steady``).

Only the observation is read (arrival rate, mean prompt; never ``info["oracle/*"]``). The table and
the detector settings are searched on training seeds (``python -m
inferencegym.evaluation.search_phase_rule``) and shipped in ``inferencegym/data/phase_rule.json``; a
task without an entry uses the clairvoyant's per-phase table with default detector settings, and a
phase missing from the table the task's best static configuration.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inferencegym.envs.actions import ServeAction
from inferencegym.envs.serve_env import OBS_FEATURES, nominal_rates
from inferencegym.policies import register_policy
from inferencegym.policies.baselines import _clairvoyant_table, _data_table, best_static_action
from inferencegym.tasks.spec import get_task

_I = {name: i for i, name in enumerate(OBS_FEATURES)}
PHI_GRID = np.linspace(0.0, 2.0 * np.pi, 360, endpoint=False)
"""Candidate phase offsets of the sinusoid (1 degree apart)."""
DEFAULT_SETTINGS: dict[str, float] = {"lead_windows": 0.0, "threshold_shift": 0.0,
                                      "mega_hold_windows": 1.0, "on_threshold": 0.5}
"""Detector settings used when the shipped table has none for a task."""


def _typical_prompt_tokens(w) -> float:
    """Mean prompt length of the regular (non-mega) requests, from the public spec."""
    if w.length_fit == "lognormal":
        return float(min(w.max_prompt_tokens, w.prompt_median_tokens * math.exp(w.prompt_sigma ** 2 / 2)))
    return float(min(w.max_prompt_tokens, 1000.0))


class PhaseRulePolicy:
    """Observable phase forecast + per-phase configuration table (see the module docstring)."""

    def __init__(self, task_id: str, table: dict[str, Any] | None = None,
                 settings: dict[str, float] | None = None):
        self.task = task = get_task(task_id)
        w = task.workload
        self.process = w.process if w.process in ("sinusoidal", "onoff") else "steady"
        self.default = best_static_action(task_id)
        shipped = _data_table("phase_rule.json").get("tasks", {}).get(task_id, {})
        if table is None:
            table = shipped.get("phases") or \
                _clairvoyant_table().get("tasks", {}).get(task_id, {}).get("phases", {})
        self.by_phase = {k: v if isinstance(v, ServeAction) else ServeAction(**v) for k, v in table.items()}
        self.settings = {**DEFAULT_SETTINGS, **shipped.get("settings", {}), **(settings or {})}
        self.nominal_rps, _ = nominal_rates(task)
        self.window_s = task.window_s
        self.typical_prompt = _typical_prompt_tokens(w)
        self.mega_tokens = float(w.mega_prompt_tokens)
        self.prompt_clip = float(w.max_prompt_tokens)
        if self.process == "sinusoidal":
            omega = 2.0 * np.pi / w.period_s
            sign = np.array([{"modulated": 1.0, "anti": -1.0}.get(p, 0.0) for p in w.tenant_rate_profile])
            base = w.rate_rps * np.asarray(w.tenant_shares, dtype=float)
            self._base = float(base.sum()) * task.window_s   # expected arrivals at sin = 0
            self._amp = float((base * sign).sum()) * w.amplitude * task.window_s
            self._omega = omega
        if self.process == "onoff":
            self._lam = (w.rate_rps * task.window_s, w.burst_rate_rps * task.window_s)  # (off, on)
            self._p_leave = (1.0 - math.exp(-task.window_s / w.off_mean_s),
                             1.0 - math.exp(-task.window_s / w.on_mean_s))
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self._k = 0                      # windows observed
        self._loglik = np.zeros_like(PHI_GRID)
        self._since_mega = 10 ** 9
        w = self.task.workload
        self._p_on = (w.on_mean_s / (w.on_mean_s + w.off_mean_s)) if self.process == "onoff" else 0.0

    # -- observation -> counts --------------------------------------------------------------
    def _window_counts(self, o: np.ndarray) -> tuple[float, int]:
        """(regular arrivals, mega-prompts) of the window the observation describes."""
        n = float(o[_I["arrival_rate"]]) * self.nominal_rps * self.window_s
        mean_prompt = float(o[_I["mean_prompt_tokens"]]) * 1000.0
        megas = 0
        if self.mega_tokens > self.prompt_clip and mean_prompt > self.prompt_clip and n >= 1:
            frac = (mean_prompt - self.typical_prompt) / (self.mega_tokens - self.typical_prompt)
            megas = int(min(round(n), max(1, round(frac * n))))
        return max(0.0, n - megas), megas

    def _sin_next(self, lead: float) -> float:
        """sin(omega t + phi_hat) at the middle of the next window (+ lead windows)."""
        phi = PHI_GRID[int(np.argmax(self._loglik))]
        t = (self._k + 0.5 + lead) * self.window_s
        return float(np.sin(self._omega * t + phi))

    def phase_forecast(self, obs: Any) -> str:
        """Update the detector with ``obs`` (the window just served) and name the next window's phase."""
        o = np.asarray(obs, dtype=np.float64)
        s = self.settings
        if self.process == "steady":
            return "steady"
        if o[_I["step"]] <= 0.0 and self._k > 0:  # a new episode began without reset()
            self.reset()
        if o[_I["step"]] > 0.0:  # reset's observation (step 0) describes no window
            n, megas = self._window_counts(o)
            self._since_mega = 0 if megas else self._since_mega + 1
            if self.process == "sinusoidal":
                t = (self._k + 0.5) * self.window_s
                lam = np.maximum(self._base + self._amp * np.sin(self._omega * t + PHI_GRID), 1e-6)
                self._loglik += n * np.log(lam) - lam
            else:
                p = self._p_on
                like_off = math.exp(-self._lam[0]) * self._lam[0] ** n
                like_on = math.exp(-self._lam[1]) * self._lam[1] ** n
                post = p * like_on / max(p * like_on + (1 - p) * like_off, 1e-300)
                self._p_on = post * (1 - self._p_leave[1]) + (1 - post) * self._p_leave[0]
            self._k += 1
        if self.process == "onoff":
            return "on" if self._p_on > s["on_threshold"] else "off"
        if self._k == 0:
            base = "low"
        else:
            high = self._sin_next(s["lead_windows"]) > self.task.workload.high_phase_threshold + s["threshold_shift"]
            base = "high" if high else "low"
        mega = self._since_mega < s["mega_hold_windows"]
        return f"{base}+mega" if mega else base

    def act(self, obs: Any, info: dict | None = None) -> ServeAction:
        name = self.phase_forecast(obs)
        a = self.by_phase.get(name)
        if a is None and "+" in name:
            a = self.by_phase.get(name.split("+", 1)[0])
        return a if a is not None else self.default


register_policy("phase_rule", lambda task_id: PhaseRulePolicy(task_id),
                "observable phase forecast (sinusoid fit / on-off filter / mega-prompt detector) + "
                "per-phase configuration table searched on training seeds (best observable rule)")
