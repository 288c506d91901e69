"""Bounds on the server's heavy work: whole episodes (``/baseline``, ``/grader`` replays) run in
their own small pool behind a bounded queue, and baseline results live in an LRU cache.

Cheap routes (``/reset``, ``/step``, ``/state``, ``/healthz``) run on the ASGI server's worker
threads. The heavy routes are ``async`` and never hold one of those threads: they hand the episode
to an :class:`EpisodePool` and wait on the event loop. The pool is a separate worker process at a
lower CPU priority (``processes=True``; an episode is seconds of pure Python, which on a thread of
the server would hold the GIL against every cheap route), or threads of its own (tests). When
``workers + max_queued`` jobs are already admitted, a new one is refused at once with
:class:`BusyError` (HTTP 429 with ``Retry-After``) instead of waiting, so a client flooding
``/baseline`` costs the honest ones neither threads, nor the GIL, nor queueing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

BUSY_TARPIT_S = 1.0
"""A refused whole-episode request is answered 429 after this pause (a flood that ignores
``Retry-After`` then costs the server one cheap answer per connection per second)."""


class BusyError(RuntimeError):
    """Every slot and queue place is taken (the server answers 429 with ``Retry-After``)."""

    def __init__(self, message: str, retry_after_s: int = 5) -> None:
        super().__init__(message)
        self.retry_after_s = int(retry_after_s)


class EpisodePool:
    """A bounded pool for work that runs whole episodes.

    Args:
        name: what the work is (in the busy message and thread names).
        workers: jobs running at once (threads owned by this pool).
        max_queued: admitted jobs waiting for a worker, at most; one more is refused.
        retry_after_s: the ``Retry-After`` a refused caller is given.
        processes: run jobs in ``workers`` spawned processes (started at the first job, niced by
            ``initializer``) instead of threads; jobs are then top-level functions of plain
            arguments (the server's own validated values, never request bytes).
        initializer: called in each worker process when it starts.
        share_with: run on that pool's workers (one worker process for both routes) while
            admitting and refusing on this pool's own bounds.
    """

    def __init__(self, name: str, *, workers: int = 1, max_queued: int = 4, retry_after_s: int = 5,
                 processes: bool = False, initializer: Callable[[], None] | None = None,
                 share_with: EpisodePool | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if max_queued < 0:
            raise ValueError(f"max_queued must be >= 0, got {max_queued}")
        self.name = name
        self.workers = int(workers)
        self.max_queued = int(max_queued)
        self.retry_after_s = int(retry_after_s)
        self.processes = bool(processes)
        self._initializer = initializer
        self._executor: Executor | None = None
        self._share_with = share_with
        self._admitted = 0
        self._lock = threading.Lock()

    @property
    def admitted(self) -> int:
        """Jobs running or queued now."""
        with self._lock:
            return self._admitted

    def _admit(self) -> None:
        with self._lock:
            if self._admitted >= self.workers + self.max_queued:
                raise BusyError(f"the server is busy with {self._admitted} {self.name} job(s) "
                                f"({self.workers} running, at most {self.max_queued} queued); "
                                f"retry in {self.retry_after_s} s", self.retry_after_s)
            self._admitted += 1

    def _release(self) -> None:
        with self._lock:
            self._admitted -= 1

    def _get_executor(self) -> Executor:
        if self._share_with is not None:
            return self._share_with._get_executor()
        with self._lock:
            if self._executor is None:
                if self.processes:
                    self._executor = ProcessPoolExecutor(
                        max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                        initializer=self._initializer)
                else:
                    self._executor = ThreadPoolExecutor(max_workers=self.workers,
                                                        thread_name_prefix=f"ig-{self.name}")
            return self._executor

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on a pool worker, or :class:`BusyError` at once when the pool is full."""
        self._admit()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._get_executor(), fn, *args)
        finally:
            self._release()

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is None:
            return
        workers = list(getattr(executor, "_processes", {}).values())  # ProcessPoolExecutor's
        executor.shutdown(wait=False, cancel_futures=True)
        for proc in workers:  # a running episode is abandoned, not awaited: stop the process now
            if proc.is_alive():
                proc.terminate()


class ResultCache:
    """A thread-safe least-recently-used map of at most ``entries`` results (the key includes the
    seed, so an unbounded dict would grow with every seed a client tries)."""

    def __init__(self, entries: int = 256) -> None:
        if entries < 0:
            raise ValueError(f"entries must be >= 0, got {entries}")
        self.entries = int(entries)
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key not in self._data:
                return default
            self._data.move_to_end(key)
            return self._data[key]

    def put(self, key: Hashable, value: Any) -> None:
        if not self.entries:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


__all__ = ["EpisodePool", "ResultCache", "BusyError", "BUSY_TARPIT_S"]
