"""The cluster's event queue: a heap keyed ``(time, priority, seq)``.

``seq`` is a per-instance counter, so events with equal time and priority come out in the order they
were scheduled and two queues (two simulators in one process) never share state. An event is a tuple
``(time, priority, seq, a, b)`` (a fixed shape: cheaper than an object per event on the hot path);
the cluster reads the payload by position.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

_push = heapq.heappush
_pop = heapq.heappop


class EventQueue:
    """Min-heap of events; ``schedule`` / ``pop`` / ``peek`` / ``len``."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple] = []
        self._seq = itertools.count(1)

    def schedule(self, time: float, priority: int, a, b=None) -> None:
        """Add the event ``(time, priority, seq, a, b)``: at ``time`` (seconds), lower ``priority``
        first at equal times, then in scheduling order; ``a`` and ``b`` are its payload."""
        _push(self._heap, (time, priority, next(self._seq), a, b))

    def pop(self) -> tuple:
        """Remove and return the earliest event (IndexError when empty)."""
        return _pop(self._heap)

    def until(self, t: float) -> Iterator[tuple]:
        """Pop and yield events in order while the earliest is at or before ``t`` (events scheduled
        meanwhile are included when due): the simulator's main loop."""
        h = self._heap
        while h and h[0][0] <= t:
            yield _pop(h)

    def peek(self) -> tuple | None:
        """The earliest event without removing it, or None when empty."""
        h = self._heap
        return h[0] if h else None

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[tuple]:
        """Every queued event in heap (not time) order; for invariant checks."""
        return iter(self._heap)
