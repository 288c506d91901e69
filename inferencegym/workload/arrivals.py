"""Arrival processes. Each one is a small frozen dataclass with one method,
``sample(duration_s, rng) -> np.ndarray`` (sorted arrival times in ``[0, duration_s)``), and a
``to_dict()`` / ``arrival_registry.arrival_from_dict`` round trip so fits and configs are plain JSON.

This module holds the parametric and replayed processes and the renewal fits:

- `Poisson`: exponential inter-arrivals.
- `GammaRenewal`: Gamma inter-arrivals; burstiness by the coefficient of variation (shape = 1/CV^2).
- `WeibullRenewal`: Weibull inter-arrivals (shape < 1 is bursty).
- `OnOffMMPP`: two-state Markov-modulated Poisson process (on/off bursts, exponential sojourns).
- `EmpiricalRate`: piecewise-constant rate replayed from binned counts (Poisson inside each bin).
- `fit_renewal`: MLE fits of the three renewal laws with their KS statistics.

The fitted default, `MarkovBins` with `fit_markov_bins`, is in ``arrivals_markov.py``; the
registry of kinds (`ARRIVAL_KINDS`, `arrival_from_dict`) with `Diurnal`, which time-warps any
registered process, in ``arrival_registry.py``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from inferencegym.workload.stats import bin_counts

__all__ = ["ArrivalProcess", "Poisson", "GammaRenewal", "WeibullRenewal", "OnOffMMPP",
           "EmpiricalRate", "fit_renewal", "check_duration"]


class ArrivalProcess(Protocol):
    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray: ...
    def to_dict(self) -> dict: ...


def check_duration(duration_s: float) -> None:
    if not (duration_s >= 0 and math.isfinite(duration_s)):
        raise ValueError(f"duration_s must be a finite number >= 0, got {duration_s}")


def _renewal(duration_s: float, mean_iat: float, draw, rng: np.random.Generator) -> np.ndarray:
    """Cumulative sums of i.i.d. inter-arrivals from ``draw(n)`` until ``duration_s``."""
    check_duration(duration_s)
    if duration_s == 0:
        return np.zeros(0)
    chunks, t = [], 0.0
    n = max(16, int(duration_s / mean_iat * 1.1) + 16)
    while t < duration_s:
        x = np.cumsum(draw(n)) + t
        chunks.append(x)
        t = float(x[-1])
    a = np.concatenate(chunks)
    return a[a < duration_s]


@dataclass(frozen=True, kw_only=True)
class Poisson:
    """Homogeneous Poisson arrivals."""

    rate_per_s: float
    """Mean arrival rate (requests/s), > 0."""

    def __post_init__(self):
        if not self.rate_per_s > 0:
            raise ValueError(f"Poisson: rate_per_s must be > 0, got {self.rate_per_s}")

    def sample(self, duration_s, rng):
        return _renewal(duration_s, 1 / self.rate_per_s, lambda n: rng.exponential(1 / self.rate_per_s, n), rng)

    def to_dict(self):
        return {"kind": "poisson", **asdict(self)}


@dataclass(frozen=True, kw_only=True)
class GammaRenewal:
    """Renewal process with Gamma inter-arrivals of mean 1/rate and coefficient of variation ``cv``."""

    rate_per_s: float
    """Mean arrival rate (requests/s), > 0."""
    cv: float = 1.0
    """Inter-arrival CV (1 = Poisson, > 1 bursty, < 1 regular); shape = 1/cv^2."""

    def __post_init__(self):
        if not (self.rate_per_s > 0 and self.cv > 0):
            raise ValueError(f"GammaRenewal: need rate_per_s > 0 and cv > 0, got {self.rate_per_s}, {self.cv}")

    def sample(self, duration_s, rng):
        k = 1 / self.cv ** 2
        theta = 1 / (self.rate_per_s * k)
        return _renewal(duration_s, 1 / self.rate_per_s, lambda n: rng.gamma(k, theta, n), rng)

    def to_dict(self):
        return {"kind": "gamma", **asdict(self)}


@dataclass(frozen=True, kw_only=True)
class WeibullRenewal:
    """Renewal process with Weibull inter-arrivals of mean 1/rate."""

    rate_per_s: float
    """Mean arrival rate (requests/s), > 0."""
    shape: float = 1.0
    """Weibull shape (1 = Poisson, < 1 bursty)."""

    def __post_init__(self):
        if not (self.rate_per_s > 0 and self.shape > 0):
            raise ValueError("WeibullRenewal: need rate_per_s > 0 and shape > 0, got "
                             f"{self.rate_per_s}, {self.shape}")

    def sample(self, duration_s, rng):
        scale = 1 / (self.rate_per_s * math.gamma(1 + 1 / self.shape))
        return _renewal(duration_s, 1 / self.rate_per_s, lambda n: scale * rng.weibull(self.shape, n), rng)

    def to_dict(self):
        return {"kind": "weibull", **asdict(self)}


@dataclass(frozen=True, kw_only=True)
class OnOffMMPP:
    """Two-state Markov-modulated Poisson process: bursts (on) and lulls (off)."""

    rate_on_per_s: float
    """Poisson rate while on (requests/s)."""
    rate_off_per_s: float = 0.0
    """Poisson rate while off (requests/s), may be 0."""
    mean_on_s: float = 10.0
    """Mean length of an on period (exponential), seconds."""
    mean_off_s: float = 50.0
    """Mean length of an off period (exponential), seconds."""

    def __post_init__(self):
        if not (self.rate_on_per_s > 0 and self.rate_off_per_s >= 0 and self.mean_on_s > 0
                and self.mean_off_s > 0):
            raise ValueError("OnOffMMPP: need rate_on_per_s > 0, rate_off_per_s >= 0, mean_on_s > 0, "
                             f"mean_off_s > 0; got {asdict(self)}")

    @property
    def rate_per_s(self) -> float:
        p_on = self.mean_on_s / (self.mean_on_s + self.mean_off_s)
        return p_on * self.rate_on_per_s + (1 - p_on) * self.rate_off_per_s

    def sample(self, duration_s, rng):
        check_duration(duration_s)
        out, t = [], 0.0
        on = rng.random() < self.mean_on_s / (self.mean_on_s + self.mean_off_s)
        while t < duration_s:
            length = rng.exponential(self.mean_on_s if on else self.mean_off_s)
            end = min(t + length, duration_s)
            rate = self.rate_on_per_s if on else self.rate_off_per_s
            if rate > 0:
                k = rng.poisson(rate * (end - t))
                out.append(np.sort(rng.uniform(t, end, k)))
            t, on = end, not on
        return np.concatenate(out) if out else np.zeros(0)

    def to_dict(self):
        return {"kind": "onoff", **asdict(self)}


@dataclass(frozen=True, kw_only=True)
class EmpiricalRate:
    """Piecewise-constant rate (e.g. a trace's counts per bin), Poisson inside each bin.
    Replays the rate curve of a trace, not its exact arrivals; repeats cyclically past its end."""

    bin_s: float
    """Bin width (s)."""
    counts: tuple[float, ...]
    """Expected arrivals per bin."""

    def __post_init__(self):
        if not (self.bin_s > 0 and len(self.counts) > 0 and min(self.counts) >= 0):
            raise ValueError("EmpiricalRate: need bin_s > 0 and a non-empty list of counts >= 0")

    @classmethod
    def from_arrivals(cls, arrival_s: np.ndarray, bin_s: float = 10.0) -> "EmpiricalRate":
        return cls(bin_s=bin_s, counts=tuple(float(c) for c in bin_counts(arrival_s, bin_s)))

    def sample(self, duration_s, rng):
        check_duration(duration_s)
        nb = int(math.ceil(duration_s / self.bin_s))
        c = np.asarray(self.counts, np.float64)
        lam = c[np.arange(nb) % c.size]
        k = rng.poisson(lam)
        starts = np.repeat(np.arange(nb) * self.bin_s, k)
        t = np.sort(starts + rng.uniform(0, self.bin_s, starts.size))
        return t[t < duration_s]

    def to_dict(self):
        return {"kind": "empirical_rate", "bin_s": self.bin_s, "counts": list(self.counts)}


def fit_renewal(arrival_s: np.ndarray) -> dict:
    """MLE fits (loc = 0) of exponential, Gamma and Weibull laws to the positive inter-arrival
    times, each with its KS statistic against the data: ``{"poisson": {...}, "gamma": {...},
    "weibull": {...}, "best_by_ks": name}``. Each entry (minus ``ks``) is an arrival-process dict."""
    from scipy import stats as sst

    iat = np.diff(np.asarray(arrival_s, np.float64))
    if iat.size < 2:
        raise ValueError("fit_renewal: need at least three arrivals")
    rate = 1 / iat.mean()
    x = iat[iat > 0]
    out: dict = {"poisson": {"kind": "poisson", "rate_per_s": float(rate),
                             "ks": float(sst.kstest(x, "expon", args=(0, iat.mean())).statistic)}}
    a, _, scale = sst.gamma.fit(x, floc=0)
    cv = 1 / math.sqrt(a)
    out["gamma"] = {"kind": "gamma", "rate_per_s": float(rate), "cv": float(cv),
                    "ks": float(sst.kstest(x, "gamma", args=(a, 0, scale)).statistic)}
    c, _, scale = sst.weibull_min.fit(x, floc=0)
    out["weibull"] = {"kind": "weibull", "rate_per_s": float(rate), "shape": float(c),
                      "ks": float(sst.kstest(x, "weibull_min", args=(c, 0, scale)).statistic)}
    out["best_by_ks"] = min(("poisson", "gamma", "weibull"), key=lambda k: out[k]["ks"])
    return out
