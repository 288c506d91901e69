"""HTTP sessions: each client's episode in its own environment, bounded in number, expiring when idle.

OpenEnv's SDK keeps sessions only on its WebSocket route (``/ws``); its HTTP ``/reset`` ``/step``
``/state`` build a fresh env per request. This store gives the HTTP routes real sessions: ``/reset``
creates one (or reuses the one named in the body) and returns its id; ``/step`` and ``/state`` name it.

Thread safety: the store's dict is guarded by one lock; each session has its own lock so two
requests on the same session run one after the other while different sessions run in parallel.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class SessionLimitError(RuntimeError):
    """Every session slot is taken."""


class UnknownSessionError(KeyError):
    """No such session (never created, closed, or expired)."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown session"


@dataclass
class Session:
    """One client's environment and its bookkeeping."""

    session_id: str
    env: Any
    created_s: float
    last_used_s: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    owner: str = ""
    """Who created it (the client's address): the per-client cap counts these."""
    data: dict[str, Any] = field(default_factory=dict)
    """Per-session extras kept by the app (last observation/info for baseline suggestions)."""


class SessionStore:
    """Bounded, expiring map ``session_id -> Session``.

    Args:
        factory: builds a new environment for a session.
        max_sessions: number of live sessions at most; ``create`` beyond it raises
            :class:`SessionLimitError` (after expiring idle ones).
        idle_timeout_s: a session not used for this long is closed and forgotten.
        max_per_client: live sessions one owner (client address) may hold at most, so one client
            cannot take every slot.
        clock: monotonic clock (injectable for tests).
    """

    def __init__(self, factory: Callable[[], Any], *, max_sessions: int = 64,
                 idle_timeout_s: float = 600.0, max_per_client: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        max_per_client = max_sessions if max_per_client is None else int(max_per_client)
        if not 1 <= max_per_client <= max_sessions:
            raise ValueError(f"max_per_client must be in [1, max_sessions={max_sessions}], "
                             f"got {max_per_client}")
        self.max_per_client = max_per_client
        if idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be > 0, got {idle_timeout_s}")
        self._factory = factory
        self.max_sessions = int(max_sessions)
        self.idle_timeout_s = float(idle_timeout_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._owners: dict[str, str] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def create(self, owner: str = "") -> Session:
        """A new session with a fresh environment, held by ``owner`` (the client's address)."""
        self.expire_idle()
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise SessionLimitError(
                    f"session limit reached: {len(self._sessions)} active sessions (max "
                    f"{self.max_sessions}). Close one with DELETE /sessions/{{session_id}}, reuse one "
                    f"by passing its session_id to /reset, or wait: idle sessions expire after "
                    f"{self.idle_timeout_s:g} s")
            held = sum(1 for o in self._owners.values() if o == owner)
            if held >= self.max_per_client:
                raise SessionLimitError(
                    f"per-client session limit reached: this client holds {held} sessions (max "
                    f"{self.max_per_client}). Reuse one by passing its session_id to /reset, or "
                    f"close one with DELETE /sessions/{{session_id}}; idle sessions expire after "
                    f"{self.idle_timeout_s:g} s")
            sid = secrets.token_hex(16)
            now = self._clock()
            # reserve the slot before building the env (outside the lock)
            self._sessions[sid] = None  # type: ignore[assignment]
            self._owners[sid] = owner
        try:
            env = self._factory()
        except BaseException:
            with self._lock:
                self._sessions.pop(sid, None)
                self._owners.pop(sid, None)
            raise
        sess = Session(session_id=sid, env=env, created_s=now, last_used_s=now, owner=owner)
        with self._lock:
            self._sessions[sid] = sess
        return sess

    def get(self, session_id: str) -> Session:
        """The live session ``session_id`` (its idle clock restarts)."""
        self.expire_idle()
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is None:
                raise UnknownSessionError(
                    f"unknown session_id {session_id!r:.80}: it was never created, was closed, or "
                    f"expired after {self.idle_timeout_s:g} s idle. Start one with POST /reset")
            sess.last_used_s = self._clock()
            return sess

    def close(self, session_id: str) -> None:
        with self._lock:
            sess = self._sessions.pop(session_id, None)
            self._owners.pop(session_id, None)
        if sess is None:
            raise UnknownSessionError(f"unknown session_id {session_id!r:.80}")
        _close_env(sess.env)

    def expire_idle(self) -> int:
        """Close sessions idle longer than the timeout; returns how many."""
        now = self._clock()
        with self._lock:
            stale = [sid for sid, s in self._sessions.items()
                     if s is not None and now - s.last_used_s > self.idle_timeout_s
                     and not s.lock.locked()]
            dropped = [self._sessions.pop(sid) for sid in stale]
            for sid in stale:
                self._owners.pop(sid, None)
        for s in dropped:
            _close_env(s.env)
        return len(dropped)

    def close_all(self) -> None:
        with self._lock:
            dropped = [s for s in self._sessions.values() if s is not None]
            self._sessions.clear()
            self._owners.clear()
        for s in dropped:
            _close_env(s.env)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"active": len(self._sessions), "max": self.max_sessions,
                    "max_per_client": self.max_per_client, "idle_timeout_s": self.idle_timeout_s}


def _close_env(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # closing is best effort; a broken env must not block the store
            pass
