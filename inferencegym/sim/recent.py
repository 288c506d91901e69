"""The last few values of a per-replica signal (TTFTs, iteration times) and their p90, computed
once per change rather than once per read (the cluster env's router reads every replica's p90 at
every decision; most replicas have not changed since the previous one)."""

from __future__ import annotations

from collections import deque

from .interpreted import mypyc_attr


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


@mypyc_attr(native_class=False)  # a deque subclass: compiled, it stays a Python class (methods compiled)
class RecentValues(deque):
    """A bounded deque (``maxlen``) that remembers its p90 until its contents change.

    ``append`` is deque's own (C) method: the simulator appends once per iteration, far more often
    than anyone reads the p90 (``simulate`` never does). A change is seen at the next read by the
    length and the first and last *objects* held (references kept, so an identity cannot be
    reused): every append puts a new last object, as long as the same object is not appended twice
    in a row, which the simulator never does (each value is a fresh arithmetic result)."""

    def __init__(self, iterable=(), maxlen: int | None = None) -> None:
        super().__init__(iterable, maxlen)
        self._key: tuple | None = None
        self._p90 = 0.0

    def p90(self) -> float:
        """p90 of the values held (0 when empty), as :func:`p90` computes it."""
        return recent_p90(self)


def recent_p90(rv: RecentValues) -> float:
    """``rv.p90()`` (a function: compiled with the simulator core, the router features' per-replica
    reads call it without a Python method call): the cached p90 while the length and the first and
    last objects are those of the last computation, else :func:`p90`'s arithmetic on the values."""
    n = len(rv)
    if not n:
        return 0.0
    key = rv._key
    first = rv[0]
    last = rv[-1]
    if key is None or key[1] is not first or key[2] is not last or key[0] != n:
        x = sorted(rv)  # p90(rv), inline
        pos = 0.9 * (n - 1)
        lo = int(pos)
        hi = lo + 1 if lo + 1 < n else lo
        rv._key = (n, first, last)
        p = float(x[lo] + (x[hi] - x[lo]) * (pos - lo))
        rv._p90 = p
        return p
    return rv._p90
