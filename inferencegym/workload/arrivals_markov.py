"""The fitted default arrival process: `MarkovBins`, and its fit `fit_markov_bins`.

A Markov chain over rate classes of ``bin_s``-second bins, each class with its own quantile table
of bin counts, and arrivals inside a bin spaced by a Gamma(shape) renewal conditioned on the bin's
count. Optionally an hour-of-day multiplier. This is a non-parametric Markov-modulated process: it
reproduces the marginal of bin counts (hence peak-to-mean and spike share), their persistence
(burst lengths, hence long gaps and the inter-arrival CV) and the mean rate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from inferencegym.sim import portable_math

from inferencegym.workload.arrivals import check_duration
from inferencegym.workload.stats import bin_counts

__all__ = ["MarkovBins", "fit_markov_bins", "QUANTILE_LEVELS"]


@dataclass(frozen=True, kw_only=True)
class MarkovBins:
    """Fitted non-parametric Markov-modulated arrivals (see the module docstring)."""

    rate_per_s: float
    """Mean arrival rate the generator is normalised to (requests/s)."""
    bin_s: float
    """Bin width of the modulating chain (s)."""
    quantile_levels: tuple[float, ...]
    """Probability levels of the per-class quantile tables (0..1, increasing)."""
    class_quantiles: tuple[tuple[float, ...], ...]
    """Per class: bin-count quantiles at `quantile_levels` (counts per bin, de-seasonalised)."""
    transition: tuple[tuple[float, ...], ...]
    """Jump probabilities from one run of a class to the next run's class (rows sum to 1; the
    diagonal is 0 unless a class never changes)."""
    initial: tuple[float, ...]
    """Distribution of the first run's class (the empirical class frequencies by bins)."""
    sojourn_quantiles: tuple[tuple[float, ...], ...] | None = None
    """Per class: quantiles (at `quantile_levels`) of run lengths in bins (a semi-Markov chain);
    None = one bin per run (a plain Markov chain over bins)."""
    tail_from: float = 1.0
    """Quantile level above which the last (highest) class draws from an exponential tail."""
    tail_scale: float = 0.0
    """Mean excess (counts per bin) of that exponential tail; 0 = no tail (stay within the table)."""
    intra_bin_shape: float = 1.0
    """Gamma shape of the spacing of arrivals inside a bin (1 = uniform/Poisson-like)."""
    hour_of_day: tuple[float, ...] | None = None
    """Optional 24 rate multipliers (mean 1) by hour of day, applied from t = `hour_offset_s`."""
    hour_offset_s: float = 0.0
    """Seconds since midnight at t = 0 (for `hour_of_day`)."""
    normalize_rate: bool = True
    """Rescale each generated sequence so its mean rate is exactly `rate_per_s` (before rounding)."""

    def __post_init__(self):
        k = len(self.class_quantiles)
        if not (self.rate_per_s > 0 and self.bin_s > 0 and k >= 1 and len(self.transition) == k
                and len(self.initial) == k and all(len(r) == k for r in self.transition)):
            raise ValueError("MarkovBins: inconsistent parameters (need rate_per_s > 0, bin_s > 0, and "
                             f"K classes with a KxK transition matrix and K initial probabilities; K={k})")
        if self.hour_of_day is not None and len(self.hour_of_day) != 24:
            raise ValueError(f"MarkovBins: hour_of_day needs 24 values, got {len(self.hour_of_day)}")

    def sample_bin_levels(self, nbins: int, rng: np.random.Generator) -> np.ndarray:
        P = np.cumsum(np.asarray(self.transition, np.float64), axis=1)
        P[:, -1] = 1.0
        init = np.cumsum(np.asarray(self.initial, np.float64))
        init[-1] = 1.0
        levels = np.asarray(self.quantile_levels, np.float64)
        soj = None if self.sojourn_quantiles is None else np.asarray(self.sojourn_quantiles, np.float64)
        states = np.empty(nbins, np.int64)
        s = int(np.searchsorted(init, rng.random(), side="right"))
        i = 0
        while i < nbins:
            if soj is None:
                run = 1
            else:
                run = max(1, int(np.floor(np.interp(rng.random(), levels, soj[s]) + rng.random())))
            states[i:i + run] = s
            i += run
            s = int(np.searchsorted(P[s], rng.random(), side="right"))
        table = np.asarray(self.class_quantiles, np.float64)
        v = rng.random(nbins)
        x = np.empty(nbins)
        top = table.shape[0] - 1
        for c in range(table.shape[0]):
            m = states == c
            x[m] = np.interp(v[m], levels, table[c])
        if self.tail_scale > 0 and self.tail_from < 1:
            m = (states == top) & (v > self.tail_from)
            x0 = np.interp(self.tail_from, levels, table[top])
            x[m] = x0 + self.tail_scale * portable_math.log((1 - self.tail_from) / (1 - v[m]))
        if self.hour_of_day is not None:
            hours = ((self.hour_offset_s + (np.arange(nbins) + 0.5) * self.bin_s) // 3600 % 24).astype(int)
            x = x * np.asarray(self.hour_of_day)[hours]
        return x

    def sample(self, duration_s, rng):
        check_duration(duration_s)
        nb = int(math.ceil(duration_s / self.bin_s))
        if nb == 0:
            return np.zeros(0)
        x = self.sample_bin_levels(nb, rng)
        x[-1] *= (duration_s - (nb - 1) * self.bin_s) / self.bin_s  # a partial last bin
        if self.normalize_rate and x.sum() > 0:
            x = x * (self.rate_per_s * duration_s / x.sum())
        counts = np.floor(x + rng.random(nb)).astype(np.int64)  # stochastic rounding keeps the mean
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0)
        # n arrivals in a bin: n+1 Gamma(k) spacings normalised to the bin (a renewal conditioned on n)
        bins = np.repeat(np.arange(nb), counts + 1)
        g = rng.gamma(self.intra_bin_shape, 1.0, bins.size)
        starts = np.concatenate(([0], np.cumsum(counts + 1)[:-1]))
        cs = np.cumsum(g)
        before = np.concatenate(([0.0], cs))[starts]
        within = cs - np.repeat(before, counts + 1)
        tot = np.repeat(np.add.reduceat(g, starts), counts + 1)
        last = np.repeat(np.cumsum(counts + 1) - 1, counts + 1)
        keep = np.arange(bins.size) != last  # drop the closing spacing of each bin
        width = np.full(nb, self.bin_s)
        width[-1] = duration_s - (nb - 1) * self.bin_s
        # within / tot can exceed 1 by a rounding error (cumsum and reduceat sum in other orders), and
        # bin start + fraction x width can round past the next bin's start: clip the fraction and
        # make the result non-decreasing (a no-op except at such float boundaries).
        frac = np.minimum(within / tot, 1.0)
        t = np.maximum.accumulate((bins * self.bin_s + frac * width[bins])[keep])
        return t[t < duration_s]

    def to_dict(self):
        nested = ("class_quantiles", "transition", "sojourn_quantiles")
        out: dict = {"kind": "markov_bins"}
        for k, v in asdict(self).items():
            if k in nested and v is not None:
                v = [list(r) for r in v]
            elif isinstance(v, tuple):
                v = list(v)
            out[k] = v
        return out


QUANTILE_LEVELS = tuple(np.round(np.linspace(0, 1, 21), 4).tolist())


def _runs(classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(class of each run, length of each run) of a class sequence."""
    change = np.flatnonzero(np.diff(classes)) + 1
    starts = np.concatenate(([0], change))
    lengths = np.diff(np.concatenate((starts, [classes.size])))
    return classes[starts], lengths


def fit_markov_bins(arrival_s: np.ndarray, *, bin_s: float = 10.0, max_classes: int = 8,
                    min_bins_per_class: int = 8, semi_markov: bool = True,
                    tail: bool = True) -> MarkovBins:
    """Fit `MarkovBins` to arrival times (general: no parameter depends on a particular trace).

    1. Counts in ``bin_s``-second bins from the first arrival. For traces longer than two days,
       hour-of-day multipliers are fitted and divided out first.
    2. Classes: empty bins form one class; the other bins are split at the count quantiles
       0.5, 0.75, 0.875, ... (each split halves the upper part, so the classes get finer towards
       the bursts that set peak-to-mean) while every class keeps >= ``min_bins_per_class`` bins,
       at most ``max_classes`` classes.
    3. Each class keeps a 21-point quantile table of its counts; with ``semi_markov`` also a
       quantile table of its run lengths (consecutive bins in the class), and the chain jumps
       between runs with the empirical run-to-run frequencies (else a plain bin-to-bin chain).
    4. With ``tail``, the highest class draws above its 80 % quantile from an exponential tail
       whose mean excess is the class's (peaks-over-threshold), so a generated trace can exceed
       the observed maximum as another hour of the real service could.
    5. Inside a bin, the Gamma shape of arrival spacing is 1/CV^2 of the within-bin
       inter-arrival times (clipped to [0.05, 20]).
    """
    a = np.asarray(arrival_s, np.float64)
    if a.size < 2 or a[-1] - a[0] <= 0:
        raise ValueError("fit_markov_bins: need at least two arrivals spanning a positive time")
    counts = bin_counts(a, bin_s).astype(np.float64)
    if counts.size < 2:
        raise ValueError(f"fit_markov_bins: the trace spans {a[-1] - a[0]:.1f} s, less than two "
                         f"{bin_s}-s bins; use a smaller bin_s or a longer trace")
    rate = a.size / (a[-1] - a[0])
    hod = None
    if counts.size * bin_s >= 2 * 86400:
        hours = ((np.arange(counts.size) + 0.5) * bin_s // 3600 % 24).astype(int)
        per_hour = np.array([counts[hours == h].mean() if np.any(hours == h) else np.nan for h in range(24)])
        per_hour = np.where(np.isfinite(per_hour) & (per_hour > 0), per_hour, np.nanmean(per_hour))
        mult = per_hour / per_hour.mean()
        counts = counts / mult[hours]
        hod = tuple(float(x) for x in mult)
    zero = counts <= 0
    classes = np.zeros(counts.size, np.int64)
    pos = counts[~zero]
    n_pos_classes = max_classes - (1 if zero.any() else 0)
    levels = []
    q = 0.5
    while len(levels) + 1 < n_pos_classes and pos.size * (1 - q) >= min_bins_per_class:
        levels.append(q)
        q = 1 - (1 - q) / 2
    if pos.size:
        edges = np.unique(np.quantile(pos, levels)) if levels else np.zeros(0)
        pos_class = np.searchsorted(edges, pos, side="right")
        used = np.unique(pos_class)
        pos_class = np.searchsorted(used, pos_class)
        classes[~zero] = pos_class + (1 if zero.any() else 0)
    K = int(classes.max()) + 1
    tables = [tuple(float(x) for x in np.quantile(counts[classes == c], QUANTILE_LEVELS)) for c in range(K)]
    freq = np.bincount(classes, minlength=K).astype(np.float64)
    freq /= freq.sum()
    T = np.zeros((K, K))
    sojourn = None
    if semi_markov:
        run_class, run_len = _runs(classes)
        np.add.at(T, (run_class[:-1], run_class[1:]), 1.0)
        sojourn = tuple(tuple(float(x) for x in np.quantile(run_len[run_class == c], QUANTILE_LEVELS))
                        for c in range(K))
        fallback = np.tile(freq, (K, 1))
        np.fill_diagonal(fallback, 0.0)
        fallback = np.where(fallback.sum(1, keepdims=True) > 0, fallback, np.eye(K))
        fallback /= fallback.sum(1, keepdims=True)
    else:
        np.add.at(T, (classes[:-1], classes[1:]), 1.0)
        fallback = np.tile(freq, (K, 1))
    rows = T.sum(axis=1, keepdims=True)
    T = np.where(rows > 0, T / np.maximum(rows, 1), fallback)
    tail_from, tail_scale = 1.0, 0.0
    if tail:
        top = counts[classes == K - 1]
        x0 = float(np.quantile(top, 0.8))
        exc = top[top > x0] - x0
        if exc.size:
            tail_from, tail_scale = 0.8, float(exc.mean())
    idx = np.floor((a - a[0]) / bin_s).astype(np.int64)
    iat = np.diff(a)
    inner = iat[idx[1:] == idx[:-1]]
    shape = 1.0
    if inner.size > 10 and inner.mean() > 0:
        cv = inner.std() / inner.mean()
        shape = float(np.clip(1 / cv ** 2, 0.05, 20.0)) if cv > 0 else 20.0
    return MarkovBins(rate_per_s=float(rate), bin_s=float(bin_s), quantile_levels=QUANTILE_LEVELS,
                      class_quantiles=tuple(tables),
                      transition=tuple(tuple(float(x) for x in r) for r in T),
                      initial=tuple(float(x) for x in freq), sojourn_quantiles=sojourn,
                      tail_from=tail_from, tail_scale=tail_scale,
                      intra_bin_shape=shape, hour_of_day=hod)
