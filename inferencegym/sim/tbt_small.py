"""A window's figures in plain Python where numpy's call overhead exceeds the arithmetic, bit for
bit numpy's: TBT percentiles and mean of small windows, and the percentiles of short lists
(:func:`pct`: TTFT, TPOT, end-to-end and queueing percentiles of a window).

An env step's window holds a few TBT records (a one-replica static_workload window: ~4 records of
~50 values); there the numpy calls of ``metrics.weighted_arith_percentiles`` (its expansion path)
and ``window_metrics._arith_mean`` cost more than the arithmetic (~15 calls of ~1-2 us). These
functions compute the same floats with the same operations in the same order, and return None
(the caller then uses numpy) outside the cases where that holds:

* percentiles: every value ``d0 + step * i`` is one IEEE multiply and add as numpy's elementwise
  ones (the int ``i`` converted exactly); a stable sort by value (Python's, as ``argsort(kind=
  "stable")``); the running weight sum in order (``cumsum`` is sequential); the first index whose
  running sum reaches ``total * q / 100`` (``searchsorted(side="left")``). Not taken with a NaN
  anywhere (numpy sorts NaN last; Python's order is undefined) or over :data:`MAX_VALUES` values;
* mean: every product as numpy's elementwise ops, and both sums as numpy's float64 ``sum`` of a
  contiguous array adds them (:func:`np_sum`: the identity 0.0 plus numpy's pairwise sum, in-order
  below 8 values, eight interleaved partial sums up to 128, halves above); up to
  :data:`MAX_MEAN_RECORDS` records.

A window of speculative steps holds hundreds of one-value records (``(gap / n, 0.0, 1, n)`` per
sequence per step): :func:`one_value_figures` converts only their values and weights (not the
constant step and count columns) and takes the sort path of ``weighted_arith_percentiles`` and the
mean of ``_arith_mean`` with ``n = 1``, ``step = 0`` folded in (``d0 + 0.0 * ...`` is ``d0`` unless
``d0`` is -0.0: declined, as any sign bit). Its arrays come from ``struct.pack`` (~2.5x cheaper
than ``np.asarray`` of a list); with integer weights only the three positions of the repeated
values' sorted order are selected (``ndarray.partition``: numpy's selection orders as its sort).

``tests/sim/test_sim_hot_path.py`` compares both with numpy on random record sets.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left
from itertools import accumulate
from operator import itemgetter

import numpy as np

NAN = math.nan

MAX_VALUES = 64
"""Expanded values up to which the plain-Python percentiles are used (numpy's set-up is cheaper above)."""

MAX_MEAN_RECORDS = 64
"""Records up to which the plain-Python mean is used (~0.25 us a record; numpy's ~8 calls above)."""

EXPAND_MAX = 20_000
"""``weighted_arith_percentiles``' default ``expand_max``: up to this many values it sorts them."""

_first = itemgetter(0)


def small_percentiles(d0: list, step: list, n: list, w: list, qs: tuple[float, ...]) -> list[float] | None:
    """``weighted_arith_percentiles(*arrays, qs)`` for at most :data:`MAX_VALUES` values, or None."""
    if not d0 or len(d0) > MAX_VALUES:  # (records hold >= 1 value each: too many values)
        return None
    tot_n = 0
    for x in n:
        tot_n += x
    if tot_n > MAX_VALUES:
        return None
    pairs: list = []
    add = pairs.append
    for a, s, k, c in zip(d0, step, n, w):
        if a != a or s != s or c != c:
            return None  # NaN: numpy's order
        if not s >= 0.0:
            s = 0.0  # np.maximum(step, 0.0)
        c = float(c)
        for i in range(int(k)):
            add((a + s * i, c))
    if len(pairs) != tot_n:
        return None  # a non-integral or negative count: the numpy path decides
    pairs.sort(key=_first)
    cw = list(accumulate(c for _, c in pairs))
    tot = cw[-1]
    last = len(pairs) - 1
    out = []
    for q in qs:
        i = bisect_left(cw, tot * float(q) / 100.0)
        out.append(pairs[i if i < last else last][0])
    return out


def _pairwise(a: list, lo: int, n: int) -> float:
    """numpy's ``pairwise_sum`` of ``a[lo:lo + n]`` (``loops_utils.h``), in the same association."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        i = lo + 8
        end = lo + n - (n % 8)
        while i < end:
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < lo + n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


def np_sum(a: list) -> float:
    """``float(np.asarray(a, np.float64).sum())`` for a list of floats: the reduction starts from
    the identity 0.0 and adds the pairwise sum (so a sum of -0.0s is 0.0, as numpy gives)."""
    return 0.0 + _pairwise(a, 0, len(a))


def small_mean(d0: list, step: list, n: list, w: list) -> float | None:
    """``window_metrics._arith_mean(*arrays)`` for up to :data:`MAX_MEAN_RECORDS` records, or None."""
    if not d0 or len(d0) > MAX_MEAN_RECORDS:
        return None
    nw = []
    terms = []
    for a, s, k, c in zip(d0, step, n, w):
        k = float(k)
        c = float(c)
        nw.append(k * c)
        terms.append(c * (k * a + s * k * (k - 1) / 2))
    tw = np_sum(nw)
    if tw <= 0:
        return math.nan
    return np_sum(terms) / tw


def one_value_figures(d0: list, step: list, n: list, w: list, qs: tuple[float, ...],
                      with_mean: bool = True) -> tuple[list[float], float] | None:
    """(``weighted_arith_percentiles(*arrays, qs)``, ``_arith_mean(*arrays)``) when every record
    is one value (count 1, step 0.0) and there are at most :data:`EXPAND_MAX`, or None. Without
    ``with_mean`` the mean is returned as NaN (not computed: a tenant's readout needs none)."""
    m = len(d0)
    # (``any(step)`` is False exactly when every step equals 0.0, for numbers: a truth test per
    # element instead of ``count(0.0)``'s float comparison)
    if not m or m > EXPAND_MAX or n.count(1) != m or any(step):
        return None
    vals = _f64(d0)
    if vals is None or np.signbit(vals).any():
        return None  # (-0.0 + 0.0 is 0.0: leave it to the full path)
    int_w = _int_weights(w)
    if int_w is not None:  # the speculative steps' token counts
        ex = np.repeat(vals, int_w)
        total = ex.size
        if total and total < 2 ** 53 and all(0 < q <= 100 for q in qs):
            # integer weights: each value repeated weight times, in order; the running weight sum
            # at position i is i + 1 (exact, as the float cumsum of integers below 2**53), so the
            # first position reaching ``total * q / 100`` is its ceiling minus one: the same value
            # as the stable argsort / cumsum / searchsorted below (a value's weight all before
            # or at its ties' end: W(< v) < target <= W(<= v) picks the same v). Only those
            # positions of the sorted order are needed: ``partition`` puts each one's value
            # there (numpy's selection orders as its sort, NaN last), without the full sort.
            pos = []
            for q in qs:
                i = math.ceil(float(total) * float(q) / 100.0) - 1
                pos.append(i if i > 0 else 0)
            ex.partition(sorted(set(pos)))
            pcts = [float(ex[i]) for i in pos]
            # the mean's weights as floats are exact integers (below 2**53): their float sum is
            # ``total`` and the products are ``astype(float64) * vals``'s (the same casts)
            mean = float((int_w * vals).sum()) / float(total) if with_mean else math.nan
            return pcts, mean
    ws = np.asarray(w, dtype=np.float64)
    order = np.argsort(vals, kind="stable")
    cw = np.cumsum(ws[order])
    idx = np.searchsorted(cw, cw[-1] * np.asarray(qs, dtype=np.float64) / 100.0, side="left")
    last = m - 1
    sv = vals[order]
    pcts = [float(sv[i if i < last else last]) for i in idx.tolist()]
    if not with_mean:
        return pcts, math.nan
    tw = ws.sum()  # (n * w).sum() with n = 1.0
    mean = math.nan if tw <= 0 else float((ws * vals).sum() / tw)
    return pcts, mean


def _f64(d0: list) -> np.ndarray | None:
    """``d0`` as a float64 array (each value as ``float(x)``, as ``np.asarray(d0, np.float64)``
    gives for floats), or None for a value ``struct`` does not pack as a double. ``struct.pack``
    converts a list ~2.5x faster than ``np.asarray`` / ``array("d", ..)`` (no per-element type
    discovery or argument parsing)."""
    try:
        return np.frombuffer(struct.pack(f"{len(d0)}d", *d0), dtype=np.float64)
    except (struct.error, TypeError, OverflowError):
        return None


def _int_weights(w: list) -> np.ndarray | None:
    """``w`` as an int64 array when every weight is a non-negative Python int (else None)."""
    try:
        a = np.frombuffer(struct.pack(f"{len(w)}q", *w), dtype=np.int64)
    except (struct.error, TypeError, OverflowError):
        return None  # a float weight (or one beyond int64)
    return a if not a.size or a.min() >= 0 else None


def pct(values, qs: tuple[float, ...] = (50, 90, 99)) -> list[float]:
    """Percentiles (linear interpolation, numpy's default) or NaN for an empty sample."""
    if isinstance(values, list):
        if not values:
            return [NAN for _ in qs]
        if len(values) <= 64:  # [env engineer, issue 5] fast path
            small = _small_pct(values, qs)
            if small is not None:
                return small
    a = np.asarray(values, float)
    if a.size == 0:
        return [NAN for _ in qs]
    if a.ndim == 1 and type(qs) is tuple:  # sorted by numpy, the ranks and interpolation of
        s = np.sort(a)                     # ``_small_pct`` (as np.percentile's "linear" method, bit
        if not s[-1] != s[-1]:             # for bit; without its partition set-up and numpy.ma import)
            return _sorted_pct(s, qs)
    return [float(v) for v in np.percentile(a, qs)]


def _sorted_pct(a, qs: tuple[float, ...]) -> list[float]:
    """numpy's "linear" percentiles of the sorted, NaN-free sequence ``a`` (see ``_small_pct``)."""
    key = (len(a), qs)
    pos = _PCT_POS.get(key)
    if pos is None:
        pos = _PCT_POS[key] = _pct_positions(len(a), qs)
    out = []
    for lo, hi, g in pos:
        x, y = float(a[lo]), float(a[hi])
        d = y - x
        out.append(y - d * (1.0 - g) if g >= 0.5 else x + d * g)
    return out


# ---- [added by the env engineer, issue 5; moved here from metrics.py for size] -----------------
def _pct_positions(n: int, qs: tuple[float, ...]) -> tuple[tuple[int, int, float], ...]:
    """Per quantile: the two neighbouring ranks and the fraction between them, as numpy's "linear"
    method finds them for ``n`` sorted values (depends on ``n`` and ``q`` only: memoised)."""
    out = []
    for q in qs:
        vi = (n - 1) * (q / 100.0)
        lo = math.floor(vi)
        g = vi - lo
        lo = min(max(int(lo), 0), n - 1)
        out.append((lo, min(lo + 1, n - 1), g))
    return tuple(out)


_PCT_POS: dict = {}
"""(n, qs) -> :func:`_pct_positions` (a pure function's memo: a few dozen entries)."""


def _small_pct(values: list, qs: tuple[float, ...]) -> list[float] | None:
    """numpy's default ("linear") percentile in plain Python for short lists: bit-identical to
    ``np.percentile`` (checked on 20,000 random samples) and ~10x faster below ~64 values, which is
    what window_stats() sees once per env step. None when a value is NaN (numpy handles those)."""
    a = sorted(map(float, values))
    if a[-1] != a[-1] or a[0] != a[0]:
        return None
    key = (len(a), qs)
    pos = _PCT_POS.get(key) if type(qs) is tuple else None
    if pos is None:
        pos = _pct_positions(len(a), qs)
        if type(qs) is tuple:
            _PCT_POS[key] = pos
    out = []
    for lo, hi, g in pos:
        x, y = a[lo], a[hi]
        d = y - x
        out.append(y - d * (1.0 - g) if g >= 0.5 else x + d * g)
    return out
# ---- end of the env engineer's block ---------------------------------------------------------
