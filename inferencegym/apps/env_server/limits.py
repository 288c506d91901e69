"""Bounds on the server's heavy work: how many baseline runs / grader replays run at once and how
many baseline results are kept.

``/baseline`` and ``/grader`` (replay) run whole episodes on the server. Each goes through a
:class:`BaselineGate`: at most ``concurrency`` computations at once (a caller waits up to ``wait_s``
for a slot, then gets :class:`BusyError` -> HTTP 429 with ``Retry-After``), and ``/baseline``'s
results live in a least-recently-used cache of ``cache_entries`` rows (the key includes the seed, so
an unbounded dict would grow with every seed a client tries).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any


class BusyError(RuntimeError):
    """Every slot is taken (the server answers 429)."""


class BaselineGate:
    """A bounded-concurrency gate with an optional LRU cache of results.

    Args:
        concurrency: computations running at once at most.
        cache_entries: results kept (0: no cache).
        wait_s: how long a caller waits for a slot before :class:`BusyError`.
    """

    def __init__(self, *, concurrency: int = 1, cache_entries: int = 256, wait_s: float = 5.0) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if cache_entries < 0:
            raise ValueError(f"cache_entries must be >= 0, got {cache_entries}")
        self.concurrency = int(concurrency)
        self.cache_entries = int(cache_entries)
        self.wait_s = float(wait_s)
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._lock = threading.Lock()
        self._cache: OrderedDict[Hashable, Any] = OrderedDict()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        if not self._slots.acquire(timeout=self.wait_s):
            raise BusyError(f"the server is busy with {self.concurrency} episode run(s) already; "
                            f"retry in a few seconds")
        try:
            yield
        finally:
            self._slots.release()

    def cached(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``'s result for ``key``, from the cache when there (computed in a slot)."""
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        with self.slot():
            with self._lock:  # another caller may have filled it while we waited
                if key in self._cache:
                    return self._cache[key]
            value = compute()
        if self.cache_entries:
            with self._lock:
                self._cache[key] = value
                self._cache.move_to_end(key)
                while len(self._cache) > self.cache_entries:
                    self._cache.popitem(last=False)
        return value

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)


__all__ = ["BaselineGate", "BusyError"]
