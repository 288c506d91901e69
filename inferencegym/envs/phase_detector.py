"""Observable phase forecast of the phased single-agent tasks (issue 21).

The hidden phase of ``bursty_workload`` (Markov on/off) and ``adversarial_multitenant`` (a 60-s
sinusoid with mega-prompts in its quiet half) is not in the observation, but the task's *public*
workload spec (``TaskSpec.workload``: rates, period, amplitude, on/off means, prompt clip) says how
it shapes the arrivals the observation shows. :class:`PhaseDetector` reads one observation per window
(arrival rate and mean prompt only; never ``info["oracle/*"]``) and forecasts the next window's phase:

- ``sinusoidal``: maximum-likelihood phase offset of the published sinusoid given the (mega-free)
  arrival counts so far (Poisson log-likelihood on a 1-degree grid of offsets), evaluated at the
  next window's middle plus ``lead_windows``; ``high`` when its sine exceeds the task's threshold plus
  ``threshold_shift``. A window whose mean prompt exceeds the prompt clip held a mega-prompt (the only
  prompts above the clip): ``+mega`` while one arrived in the last ``mega_hold_windows`` windows.
- ``onoff``: forward filter of the two-state Markov chain (exponential ON/OFF periods with the
  published means, Poisson arrivals at the published rates), one window ahead; ``on`` above
  ``on_threshold``.
- any other process: one phase, ``steady``.

Used by the ``phase_rule`` policy and, as input features of a learned policy
(:meth:`PhaseDetector.features`), by ``envs.history.HistoryStacker(phase_task_id=...)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inferencegym.sim import portable_math

from inferencegym.envs.serve_env import OBS_FEATURES, nominal_rates
from inferencegym.tasks.spec import TaskSpec

_I = {name: i for i, name in enumerate(OBS_FEATURES)}
PHI_GRID = np.linspace(0.0, 2.0 * np.pi, 360, endpoint=False)
"""Candidate phase offsets of the sinusoid (1 degree apart)."""
DEFAULT_SETTINGS: dict[str, float] = {"lead_windows": 0.0, "threshold_shift": 0.0,
                                      "mega_hold_windows": 1.0, "on_threshold": 0.5}
"""Detector settings used when none are given."""
_RATES: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
"""(sinusoid, window) -> ``PhaseDetector._rates``' arrays (a pure function's memo)."""
_RATES_MAX = 4096
"""Entries kept before the memo starts over (~23 MB at most)."""
PHASE_FEATURE_DIM = 3
"""Length of :meth:`PhaseDetector.features` (level 1, ``phase_features: true``)."""
PHASE_FEATURE_DIMS = {1: PHASE_FEATURE_DIM, 2: 8}
"""Length of :meth:`PhaseDetector.features` per level (``model_config.phase_features``: true = 1, or 2)."""


def phase_feature_dim(level: int | bool) -> int:
    """Number of phase features a stack with ``phase_features = level`` appends (0 when off)."""
    lv = int(level)
    if lv == 0:
        return 0
    if lv not in PHASE_FEATURE_DIMS:
        raise ValueError(f"phase_features must be false, true (1) or 2; got {level!r}")
    return PHASE_FEATURE_DIMS[lv]


def _typical_prompt_tokens(w) -> float:
    """Mean prompt length of the regular (non-mega) requests, from the public spec."""
    if w.length_fit == "lognormal":
        return float(min(w.max_prompt_tokens, w.prompt_median_tokens * math.exp(w.prompt_sigma ** 2 / 2)))
    return float(min(w.max_prompt_tokens, 1000.0))


class PhaseDetector:
    """Observation history -> next window's phase (see the module docstring)."""

    def __init__(self, task: TaskSpec, settings: dict[str, float] | None = None):
        self.task = task
        w = task.workload
        self.process = w.process if w.process in ("sinusoidal", "onoff") else "steady"
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.nominal_rps, _ = nominal_rates(task)
        self.window_s = task.window_s
        self.typical_prompt = _typical_prompt_tokens(w)
        self.mega_tokens = float(w.mega_prompt_tokens)
        self.prompt_clip = float(w.max_prompt_tokens)
        if self.process == "sinusoidal":
            sign = np.array([{"modulated": 1.0, "anti": -1.0}.get(p, 0.0) for p in w.tenant_rate_profile])
            base = w.rate_rps * np.asarray(w.tenant_shares, dtype=float)
            self._base = float(base.sum()) * task.window_s   # expected arrivals at sin = 0
            self._amp = float((base * sign).sum()) * w.amplitude * task.window_s
            self._omega = 2.0 * np.pi / w.period_s
        if self.process == "onoff":
            self._lam = (w.rate_rps * task.window_s, w.burst_rate_rps * task.window_s)  # (off, on)
            self._p_leave = (1.0 - math.exp(-task.window_s / w.off_mean_s),
                             1.0 - math.exp(-task.window_s / w.on_mean_s))
        self.reset()

    def reset(self) -> None:
        self.k = 0                      # windows observed
        self._loglik = np.zeros_like(PHI_GRID)
        self._since_mega = 10 ** 9
        self._megas_last = 0
        w = self.task.workload
        self.p_on = (w.on_mean_s / (w.on_mean_s + w.off_mean_s)) if self.process == "onoff" else 0.0

    def _window_counts(self, o: np.ndarray) -> tuple[float, int]:
        """(regular arrivals, mega-prompts) of the window the observation describes."""
        n = float(o[_I["arrival_rate"]]) * self.nominal_rps * self.window_s
        mean_prompt = float(o[_I["mean_prompt_tokens"]]) * 1000.0
        megas = 0
        if self.mega_tokens > self.prompt_clip and mean_prompt > self.prompt_clip and n >= 1:
            frac = (mean_prompt - self.typical_prompt) / (self.mega_tokens - self.typical_prompt)
            megas = int(min(round(n), max(1, round(frac * n))))
        return max(0.0, n - megas), megas

    def update(self, obs: Any) -> None:
        """Read one observation (the window just served). Step 0 (reset's observation) describes no
        window; a step-0 observation after windows were read starts a new episode."""
        o = np.asarray(obs, dtype=np.float64)
        step = o[_I["step"]]
        if step <= 0.0:
            if self.k > 0:
                self.reset()
            return
        if self.process == "steady":
            self.k += 1
            return
        n, megas = self._window_counts(o)
        self._since_mega = 0 if megas else self._since_mega + 1
        self._megas_last = megas
        if self.process == "sinusoidal":
            lam, log_lam = self._rates(self.k)
            self._loglik += n * log_lam - lam
        else:
            p = self.p_on
            like_off = math.exp(-self._lam[0]) * self._lam[0] ** n
            like_on = math.exp(-self._lam[1]) * self._lam[1] ** n
            post = p * like_on / max(p * like_on + (1 - p) * like_off, 1e-300)
            self.p_on = post * (1 - self._p_leave[1]) + (1 - post) * self._p_leave[0]
        self.k += 1

    def _rates(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The expected arrivals of window ``k`` per phase offset and their logs, memoised per
        sinusoid and window (:data:`_RATES`: the same arrays, computed once per process instead of
        once per episode; read-only)."""
        key = (self._base, self._amp, self._omega, self.window_s, k)
        got = _RATES.get(key)
        if got is None:
            t = (k + 0.5) * self.window_s
            lam = np.maximum(self._base + self._amp * np.sin(self._omega * t + PHI_GRID), 1e-6)
            log_lam = portable_math.log(lam)
            lam.flags.writeable = False
            log_lam.flags.writeable = False
            if len(_RATES) >= _RATES_MAX:
                _RATES.clear()
            got = _RATES[key] = (lam, log_lam)
        return got

    def sin_next(self, ahead: float = 0.0, fn: Any = np.sin) -> float:
        """sin(omega t + phi_hat) at the middle of the next window plus ``lead_windows`` (plus
        ``ahead`` windows; ``fn=np.cos`` for the slope's sign)."""
        phi = PHI_GRID[int(np.argmax(self._loglik))]
        t = (self.k + 0.5 + self.settings["lead_windows"] + ahead) * self.window_s
        return float(fn(self._omega * t + phi))

    def forecast(self) -> str:
        """The next window's phase name."""
        s = self.settings
        if self.process == "steady":
            return "steady"
        if self.process == "onoff":
            return "on" if self.p_on > s["on_threshold"] else "off"
        if self.k == 0:
            base = "low"
        else:
            high = self.sin_next() > self.task.workload.high_phase_threshold + s["threshold_shift"]
            base = "high" if high else "low"
        return f"{base}+mega" if self._since_mega < s["mega_hold_windows"] else base

    def features(self, level: int = 1) -> np.ndarray:
        """(``phase_feature_dim(level)``,) float32 inputs for a learned policy. Level 1: the
        forecast's load level (``sinusoidal``: the fitted sine at the next window, 0 before any
        window; ``onoff``: 2 p_on - 1), whether it forecasts the high/on phase (0/1), and whether a
        mega-prompt is recent (0/1). Level 2 adds what a switch *before* a phase change needs:
        ``sinusoidal``: the fitted cosine at the next window (rising or falling), the sine 2 and 4
        windows later; ``onoff``: 2 p_on - 1 predicted 2 and 4 windows ahead (and 0); both: windows
        since the last mega-prompt / 10 (clipped to 1) and the last window's mega-prompts / 3
        (clipped). Zeros on one-phase tasks."""
        out = np.zeros(phase_feature_dim(level), dtype=np.float32)
        if self.process == "steady":
            return out
        name = self.forecast()
        if self.process == "sinusoidal":
            out[0] = self.sin_next() if self.k > 0 else 0.0
        else:
            out[0] = 2.0 * self.p_on - 1.0
        out[1] = float(name.split("+")[0] in ("high", "on"))
        out[2] = float(name.endswith("+mega"))
        if int(level) >= 2:
            if self.process == "sinusoidal":
                if self.k > 0:
                    out[3:6] = (self.sin_next(fn=np.cos), self.sin_next(2.0), self.sin_next(4.0))
            else:
                p = self.p_on
                for i in (4, 5):
                    for _ in range(2):
                        p = p * (1 - self._p_leave[1]) + (1 - p) * self._p_leave[0]
                    out[i] = 2.0 * p - 1.0
            out[6] = min(self._since_mega, 10) / 10.0
            out[7] = min(self._megas_last, 3) / 3.0
        return out
