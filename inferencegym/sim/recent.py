"""The last few values of a per-replica signal (TTFTs, iteration times) and their p90, computed
once per change rather than once per read (the cluster env's router reads every replica's p90 at
every decision; most replicas have not changed since the previous one)."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque


def p90(values) -> float:
    """p90 with linear interpolation (numpy's default) of a short sequence; 0 when empty. Pure
    Python: np.percentile costs ~20 us per call, which dominated the router's decision time."""
    if not values:
        return 0.0
    return _p90_sorted(sorted(values))


def _p90_sorted(x: list) -> float:
    pos = 0.9 * (len(x) - 1)
    lo = int(pos)
    hi = lo + 1 if lo + 1 < len(x) else lo
    return float(x[lo] + (x[hi] - x[lo]) * (pos - lo))


class RecentValues(deque):
    """A bounded deque (``maxlen``) that remembers its p90 until the next ``append`` (the only
    mutation the simulator makes) and keeps its values sorted beside it (one insertion and one
    removal per append instead of a sort per p90: the same values, so the same p90)."""

    def __init__(self, iterable=(), maxlen: int | None = None) -> None:
        super().__init__(iterable, maxlen)
        self._p90: float | None = None
        self._sorted: list | None = sorted(self)

    def append(self, x) -> None:
        self._p90 = None
        s = self._sorted
        if s is not None:
            if x != x:  # NaN: no order; sort from scratch at the next read
                self._sorted = None
            elif len(self) == self.maxlen:
                old = self[0]
                if old != old:
                    self._sorted = None
                else:
                    del s[bisect_left(s, old)]  # an equal value: the same multiset either way
                    insort(s, x)
            else:
                insort(s, x)
        deque.append(self, x)

    def p90(self) -> float:
        """p90 of the values held (0 when empty), as :func:`p90` computes it."""
        v = self._p90
        if v is None:
            if not self:
                v = 0.0
            else:
                s = self._sorted
                if s is None or len(s) != len(self):  # (a NaN, or a mutation other than append)
                    s = sorted(self)
                    self._sorted = None if any(y != y for y in s) else s
                v = _p90_sorted(s)
            self._p90 = v
        return v
