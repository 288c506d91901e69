"""The cluster's event queue: a heap keyed ``(time, priority, seq)``.

``seq`` is a per-instance counter, so events with equal time and priority come out in the order they
were scheduled and two queues (two simulators in one process) never share state. An event is a tuple
``(time, priority, seq, a, b)`` (a fixed shape: cheaper than an object per event on the hot path);
the cluster reads the payload by position. Events of priority > 0 (everything but replica steps)
are also kept in a second heap of keys, so :meth:`next_other` (the first one due) costs O(1): a
replica may run ahead of other replicas' steps, never past an arrival or a transfer.
"""

from __future__ import annotations

import heapq
import math
import itertools
from collections.abc import Iterator

EV_STEP, EV_TRANSFER, EV_ARRIVAL = 0, 1, 2
"""Event kinds (the priority at equal times): a replica's end of planned work, a KV transfer's
arrival, a request's arrival."""

_push = heapq.heappush
_pop = heapq.heappop


class EventQueue:
    """Min-heap of events; ``schedule`` / ``pop`` / ``peek`` / ``len``."""

    __slots__ = ("_heap", "_seq", "_other")

    def __init__(self) -> None:
        self._heap: list[tuple] = []
        self._seq = itertools.count(1)
        self._other: list[tuple] = []  # keys (time, priority, seq) of the events with priority > 0

    def schedule(self, time: float, priority: int, a, b=None) -> None:
        """Add the event ``(time, priority, seq, a, b)``: at ``time`` (seconds), lower ``priority``
        first at equal times, then in scheduling order; ``a`` and ``b`` are its payload."""
        seq = next(self._seq)
        _push(self._heap, (time, priority, seq, a, b))
        if priority:
            _push(self._other, (time, priority, seq))

    def pop(self) -> tuple:
        """Remove and return the earliest event (IndexError when empty)."""
        ev = _pop(self._heap)
        if ev[1]:  # the earliest event of priority > 0 is also the earliest key of ``_other``
            _pop(self._other)
        return ev

    def until(self, t: float) -> Iterator[tuple]:
        """Pop and yield events in order while the earliest is at or before ``t`` (events scheduled
        meanwhile are included when due): the simulator's main loop."""
        h = self._heap
        o = self._other
        while h and h[0][0] <= t:
            ev = _pop(h)
            if ev[1]:
                _pop(o)
            yield ev

    def peek(self) -> tuple | None:
        """The earliest event without removing it, or None when empty."""
        h = self._heap
        return h[0] if h else None

    def next_other(self) -> float:
        """Time of the earliest queued event of priority > 0 (inf when none)."""
        o = self._other
        return o[0][0] if o else math.inf

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[tuple]:
        """Every queued event in heap (not time) order; for invariant checks."""
        return iter(self._heap)
