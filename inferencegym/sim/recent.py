"""The last few values of a per-replica signal (TTFTs, iteration times) and their p90, computed
once per change rather than once per read (the cluster env's router reads every replica's p90 at
every decision; most replicas have not changed since the previous one)."""

from __future__ import annotations

from collections import deque


def p90(values) -> float:
    """p90 with linear interpolation (numpy's default) of a short sequence; 0 when empty. Pure
    Python: np.percentile costs ~20 us per call, which dominated the router's decision time."""
    if not values:
        return 0.0
    x = sorted(values)
    pos = 0.9 * (len(x) - 1)
    lo = int(pos)
    hi = lo + 1 if lo + 1 < len(x) else lo
    return float(x[lo] + (x[hi] - x[lo]) * (pos - lo))


class RecentValues(deque):
    """A bounded deque (``maxlen``) that remembers its p90 until the next ``append`` (the only
    mutation the simulator makes)."""

    def __init__(self, iterable=(), maxlen: int | None = None) -> None:
        super().__init__(iterable, maxlen)
        self._p90: float | None = None

    def append(self, x) -> None:
        self._p90 = None
        deque.append(self, x)

    def p90(self) -> float:
        """p90 of the values held (0 when empty), as :func:`p90` computes it."""
        v = self._p90
        if v is None:
            v = self._p90 = p90(self)
        return v
