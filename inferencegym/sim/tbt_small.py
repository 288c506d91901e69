"""A small window's TBT figures in plain Python, bit for bit numpy's.

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
* mean: fewer than 8 records, where numpy's pairwise sum is the in-order sum.

A window of speculative steps holds hundreds of one-value records (``(gap / n, 0.0, 1, n)`` per
sequence per step): :func:`one_value_figures` converts only their values and weights (not the
constant step and count columns) and takes the sort path of ``weighted_arith_percentiles`` and the
mean of ``_arith_mean`` with ``n = 1``, ``step = 0`` folded in (``d0 + 0.0 * ...`` is ``d0`` unless
``d0`` is -0.0: declined, as any sign bit).

``tests/sim/test_sim_hot_path.py`` compares both with numpy on random record sets.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate
from operator import itemgetter

import numpy as np

MAX_VALUES = 64
"""Expanded values up to which the plain-Python percentiles are used (numpy's set-up is cheaper above)."""

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
    pairs = []
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


def small_mean(d0: list, step: list, n: list, w: list) -> float | None:
    """``window_metrics._arith_mean(*arrays)`` for fewer than 8 records, or None."""
    if not d0 or len(d0) >= 8:
        return None
    tw = 0.0
    num = 0.0
    for a, s, k, c in zip(d0, step, n, w):
        k = float(k)
        c = float(c)
        tw += k * c
        num += c * (k * a + s * k * (k - 1) / 2)
    if tw <= 0:
        return float("nan")
    return num / tw


def one_value_figures(d0: list, step: list, n: list, w: list,
                      qs: tuple[float, ...]) -> tuple[list[float], float] | None:
    """(``weighted_arith_percentiles(*arrays, qs)``, ``_arith_mean(*arrays)``) when every record
    is one value (count 1, step 0.0) and there are at most :data:`EXPAND_MAX`, or None."""
    m = len(d0)
    if not m or m > EXPAND_MAX or n.count(1) != m or step.count(0.0) != m:
        return None
    vals = np.asarray(d0, dtype=np.float64)
    if np.signbit(vals).any():
        return None  # (-0.0 + 0.0 is 0.0: leave it to the full path)
    ws = np.asarray(w, dtype=np.float64)
    order = np.argsort(vals, kind="stable")
    cw = np.cumsum(ws[order])
    idx = np.searchsorted(cw, cw[-1] * np.asarray(qs, dtype=np.float64) / 100.0, side="left")
    last = m - 1
    sv = vals[order]
    pcts = [float(sv[i if i < last else last]) for i in idx.tolist()]
    tw = ws.sum()  # (n * w).sum() with n = 1.0
    mean = math.nan if tw <= 0 else float((ws * vals).sum() / tw)
    return pcts, mean
