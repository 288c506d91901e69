"""The registry of arrival processes: a kind name per class, building one from its dict, and
`Diurnal`, the process that wraps any registered one.

``arrival_from_dict({"kind": ..., **params})`` is the inverse of every process's ``to_dict()``
(fits and configs are plain JSON); an unknown kind or bad parameters raise a one-line ValueError.
`Diurnal` time-warps any registered process (given as its dict) by a sinusoidal rate multiplier
``1 + A sin(...)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from inferencegym.workload.arrivals import (
    ArrivalProcess,
    EmpiricalRate,
    GammaRenewal,
    OnOffMMPP,
    Poisson,
    WeibullRenewal,
    check_duration,
)
from inferencegym.workload.arrivals_markov import MarkovBins

__all__ = ["ARRIVAL_KINDS", "Diurnal", "arrival_from_dict"]


def _warp(base_times: np.ndarray, duration_s: float, cum_fn, grid_n: int) -> np.ndarray:
    """Map operational times through the inverse of the cumulative intensity."""
    grid = np.linspace(0.0, duration_s, grid_n)
    cum = cum_fn(grid)
    return np.interp(base_times, cum, grid)


@dataclass(frozen=True, kw_only=True)
class Diurnal:
    """A base process whose rate is multiplied by ``1 + amplitude * sin(2 pi (t - peak_s) / period_s + pi/2)``
    (maximum at ``peak_s``), by time change: the base is sampled in operational time and warped."""

    base: dict
    """The base process as a dict (``{"kind": "gamma", ...}``)."""
    amplitude: float = 0.5
    """Relative amplitude in [0, 1): the rate swings between (1-A) and (1+A) times the base rate."""
    period_s: float = 86400.0
    """Period of the cycle (s)."""
    peak_s: float = 0.0
    """Time of the peak within the period (s)."""

    def __post_init__(self):
        if not (0 <= self.amplitude < 1 and self.period_s > 0):
            raise ValueError("Diurnal: need 0 <= amplitude < 1 and period_s > 0, got "
                             f"{self.amplitude}, {self.period_s}")

    def _cum(self, t):
        w = 2 * math.pi / self.period_s
        # integral of 1 + A cos(w (t - peak))
        return t + self.amplitude / w * (np.sin(w * (t - self.peak_s)) - math.sin(-w * self.peak_s))

    def sample(self, duration_s, rng):
        check_duration(duration_s)
        if duration_s == 0:
            return np.zeros(0)
        op_end = float(self._cum(np.array([duration_s]))[0])
        base = arrival_from_dict(self.base).sample(op_end, rng)
        n = int(min(2_000_000, max(1000, duration_s / self.period_s * 2000)))
        return _warp(base, duration_s, self._cum, n)

    def to_dict(self):
        return {"kind": "diurnal", **asdict(self)}


ARRIVAL_KINDS = {"poisson": Poisson, "gamma": GammaRenewal, "weibull": WeibullRenewal, "onoff": OnOffMMPP,
                 "diurnal": Diurnal, "empirical_rate": EmpiricalRate, "markov_bins": MarkovBins}


def arrival_from_dict(d: dict) -> ArrivalProcess:
    """Build an arrival process from ``{"kind": ..., **params}``."""
    d = dict(d)
    kind = d.pop("kind", None)
    if kind not in ARRIVAL_KINDS:
        raise ValueError(f"unknown arrival process '{kind}'; valid: {', '.join(sorted(ARRIVAL_KINDS))}")
    cls = ARRIVAL_KINDS[kind]
    if kind == "markov_bins":
        for k in ("quantile_levels", "initial"):
            d[k] = tuple(d[k])
        for k in ("class_quantiles", "transition", "sojourn_quantiles"):
            if d.get(k) is not None:
                d[k] = tuple(tuple(r) for r in d[k])
        if d.get("hour_of_day") is not None:
            d["hour_of_day"] = tuple(d["hour_of_day"])
    if kind == "empirical_rate":
        d["counts"] = tuple(d["counts"])
    try:
        return cls(**d)
    except TypeError as exc:
        raise ValueError(f"bad parameters for arrival process '{kind}': {exc}") from None
