"""The session store (injected clock: no sleeping) and the server's default bind address."""

from __future__ import annotations

import pytest

from inferencegym.apps.env_server.sessions import SessionLimitError, SessionStore, UnknownSessionError


class FakeEnv:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_limit_expiry_and_close():
    clock = Clock()
    store = SessionStore(FakeEnv, max_sessions=2, idle_timeout_s=10.0, clock=clock)
    a, b = store.create(), store.create()
    assert a.session_id != b.session_id and a.env is not b.env
    with pytest.raises(SessionLimitError, match="max 2"):
        store.create()
    clock.t = 8.0
    store.get(a.session_id)  # use restarts a's idle clock
    clock.t = 12.0  # b idle 12 s > 10 s, a idle 4 s
    assert store.expire_idle() == 1 and b.env.closed and not a.env.closed
    with pytest.raises(UnknownSessionError, match="expired after 10 s"):
        store.get(b.session_id)
    c = store.create()  # room again
    store.close(c.session_id)
    assert c.env.closed and len(store) == 1
    with pytest.raises(UnknownSessionError):
        store.close(c.session_id)


def test_a_busy_session_is_not_expired_under_its_user():
    clock = Clock()
    store = SessionStore(FakeEnv, max_sessions=4, idle_timeout_s=1.0, clock=clock)
    s = store.create()
    with s.lock:  # a long step in progress
        clock.t = 100.0
        assert store.expire_idle() == 0
    assert store.expire_idle() == 1


def test_a_failing_factory_frees_its_slot():
    calls = {"n": 0}

    def factory():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        return FakeEnv()

    store = SessionStore(factory, max_sessions=1)
    with pytest.raises(RuntimeError):
        store.create()
    assert len(store) == 0
    store.create()


@pytest.mark.parametrize("kw", [{"max_sessions": 0}, {"idle_timeout_s": 0}])
def test_bad_limits_are_refused(kw):
    with pytest.raises(ValueError):
        SessionStore(FakeEnv, **kw)


def test_server_binds_localhost_by_default(monkeypatch):
    import uvicorn
    from typer.testing import CliRunner

    from inferencegym.cli import app as cli_app
    from inferencegym.apps.env_server import app as server_app

    seen = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: seen.append((host, port)))
    monkeypatch.delenv("HOST", raising=False)
    monkeypatch.delenv("PORT", raising=False)
    server_app.main([])
    res = CliRunner().invoke(cli_app, ["server"])
    assert res.exit_code == 0, res.output
    assert seen == [("127.0.0.1", 7860), ("127.0.0.1", 7860)]
