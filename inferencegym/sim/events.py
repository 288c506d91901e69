"""The cluster's event queue, keyed ``(time, priority, seq)``.

``seq`` is a per-instance counter, so events with equal time and priority come out in the order they
were scheduled and two queues (two simulators in one process) never share state. An event is a tuple
``(time, priority, seq, a, b)`` (a fixed shape: cheaper than an object per event on the hot path);
the cluster reads the payload by position.

Arrivals (priority ``EV_ARRIVAL``) are kept apart from the other events, in a list sorted by key
and consumed from a moving head: a run submits its requests in arrival order before it starts, so
each lands at the list's end (O(1); one out of order is inserted by bisection) and the heap of
replica steps and transfers stays a few entries long instead of holding every future arrival (its
pushes and pops cost O(log of the events in it)). Popping takes the smaller key of the two heads,
so events come out in exactly the order of one heap. Transfer keys are also kept in a second heap,
so :meth:`next_other` (the first arrival or transfer due) costs O(1): a replica may run ahead of
other replicas' steps, never past an arrival or a transfer.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import insort
from collections.abc import Iterator

from .interpreted import mypyc_attr

EV_STEP, EV_TRANSFER, EV_ARRIVAL = 0, 1, 2
"""Event kinds (the priority at equal times): a replica's end of planned work, a KV transfer's
arrival, a request's arrival."""

_push = heapq.heappush
_pop = heapq.heappop


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class EventQueue:
    """Events in time order; ``schedule`` / ``pop`` / ``peek`` / ``until`` / ``len``."""

    __slots__ = ("_heap", "_seq", "_other", "_arr", "_ai")

    def __init__(self) -> None:
        self._heap: list[tuple] = []  # steps and transfers
        self._seq = itertools.count(1)
        self._other: list[tuple] = []  # keys (time, priority, seq) of the transfers
        self._arr: list[tuple] = []  # arrivals sorted by key; those before ``_ai`` were popped
        self._ai = 0

    def schedule(self, time: float, priority: int, a, b=None) -> None:
        """Add the event ``(time, priority, seq, a, b)``: at ``time`` (seconds), lower ``priority``
        first at equal times, then in scheduling order; ``a`` and ``b`` are its payload."""
        seq = next(self._seq)
        ev = (time, priority, seq, a, b)
        if priority == EV_ARRIVAL:
            arr = self._arr
            if self._ai and self._ai == len(arr):  # every queued arrival was popped: start afresh
                arr.clear()
                self._ai = 0
            if not arr or arr[-1] < ev:  # (seq is unique: keys never tie, payloads are not compared)
                arr.append(ev)
            else:
                insort(arr, ev, self._ai)
            return
        _push(self._heap, ev)
        if priority:
            _push(self._other, (time, priority, seq))

    def claim_first(self, time: float) -> bool:
        """An event at ``time`` of priority ``EV_STEP`` about to be scheduled would be the very next
        one popped (strictly before every queued event): take its sequence number, as
        :meth:`schedule` would, and return True; the caller handles it at once instead of queueing
        it (the same events in the same order, one push and pop fewer). False: schedule it."""
        h = self._heap
        if h and not time < h[0][0]:
            return False
        arr = self._arr
        ai = self._ai
        if ai < len(arr) and not time < arr[ai][0]:
            return False
        next(self._seq)
        return True

    def pop(self) -> tuple:
        """Remove and return the earliest event (IndexError when empty)."""
        h = self._heap
        arr = self._arr
        ai = self._ai
        if ai < len(arr) and (not h or arr[ai] < h[0]):
            self._ai = ai + 1
            return arr[ai]
        ev = _pop(h)
        if ev[1]:  # the earliest transfer is also the earliest key of ``_other``
            _pop(self._other)
        return ev

    def until(self, t: float) -> Iterator[tuple]:
        """Pop and yield events in order while the earliest is at or before ``t`` (events scheduled
        meanwhile are included when due): the simulator's main loop."""
        h = self._heap
        o = self._other
        arr = self._arr
        while True:
            ai = self._ai
            if ai < len(arr):
                ev = arr[ai]
                if h and h[0] < ev:
                    if h[0][0] > t:
                        return
                    ev = _pop(h)
                    if ev[1]:
                        _pop(o)
                else:
                    if ev[0] > t:
                        return
                    self._ai = ai + 1
            elif h and h[0][0] <= t:
                ev = _pop(h)
                if ev[1]:
                    _pop(o)
            else:
                return
            yield ev

    def peek(self) -> tuple | None:
        """The earliest event without removing it, or None when empty."""
        h = self._heap
        arr = self._arr
        ai = self._ai
        if ai < len(arr) and (not h or arr[ai] < h[0]):
            return arr[ai]
        return h[0] if h else None

    def next_other(self) -> float:
        """Time of the earliest queued event of priority > 0 (inf when none)."""
        o = self._other
        arr = self._arr
        ai = self._ai
        t = o[0][0] if o else math.inf
        if ai < len(arr) and arr[ai][0] < t:
            return arr[ai][0]
        return t

    def __len__(self) -> int:
        return len(self._heap) + len(self._arr) - self._ai

    def __bool__(self) -> bool:
        return bool(self._heap) or self._ai < len(self._arr)

    def __iter__(self) -> Iterator[tuple]:
        """Every queued event in no particular order; for invariant checks."""
        return itertools.chain(self._heap, self._arr[self._ai:])
