"""Issue 25, servers: one request never gets a 5xx (lone surrogates, deep nesting), forwarding
headers are believed only from configured proxies, whole-episode routes cannot starve the cheap
ones, and every WebSocket frame gets the HTTP limits. Real HTTP/WebSocket on 127.0.0.1; each test
failed before the fix."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from websockets.sync.client import connect

from fakes.live import live_server
from inferencegym.apps.env_server import episodes
from inferencegym.apps.env_server.app import build_app, uvicorn_options
from inferencegym.apps.http_security import HTTPLimits, json_safe
from inferencegym.apps.json_guard import JSONGuardError, parse_json
from inferencegym.envs.verifier import ReplayError
from inferencegym.apps.peers import UNTRUSTED_FORWARDED, client_key, parse_proxies

JSON = {"content-type": "application/json"}
LONE = ('"\\ud800"', '"\\udc00"', '"ok\\ud83d"', '"\\ude00x"')
"""Lone surrogates as a client writes them (valid JSON escapes, invalid Unicode)."""


@pytest.fixture(scope="module")
def server_url():
    with live_server(build_app(max_sessions=16, max_sessions_per_client=16, idle_timeout_s=600),
                     **uvicorn_options()) as url:
        yield url


def _sid(c: httpx.Client) -> str:
    r = c.post("/reset", json={"seed": 0})
    assert r.status_code == 200, r.text
    return r.json()["session_id"]


def _bodies(sid: str, s: str) -> dict[str, list[str]]:
    """One request per field of each POST route, with ``s`` (raw JSON text) in that field."""
    return {
        "/reset": [f'{{"task_id": {s}}}', f'{{"episode_id": {s}}}', f'{{"seed": {s}}}',
                   f'{{"split": {s}, "index": 0}}', f'{{{s}: 1}}', f'{{"session_id": {s}}}'],
        "/step": [f'{{"session_id": {s}, "action": {{}}}}',
                  f'{{"session_id": "{sid}", "action": {{"batch_cap": {s}}}}}',
                  f'{{"session_id": "{sid}", "action": {{"quantization_tier": {s}}}}}',
                  f'{{"session_id": "{sid}", "action": {{}}, "request_id": {s}}}'],
        "/grader": [f'{{"session_id": {s}}}', f'{{"task_id": {s}, "seed": 0, "actions": []}}',
                    f'{{"task_id": "static_workload", "seed": 0, "actions": [{{"batch_cap": {s}}}]}}'],
        "/suggest": [f'{{"session_id": "{sid}", "policy": {s}}}', f'{{"session_id": {s}}}'],
        "/mcp": [f'{{"jsonrpc": "2.0", "id": 1, "method": {s}}}',
                 f'{{"jsonrpc": "2.0", "id": {s}, "method": "tools/list"}}',
                 f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": {s}}}}}'],
        "/inferencegym/task": [f'{{"split": {s}, "index": 0}}', f'{{"split": "test", "index": {s}}}'],
    }


# -- 1. no 5xx from one request ----------------------------------------------------------------
@pytest.mark.parametrize("lone", LONE)
def test_lone_surrogates_are_4xx_with_one_line_on_every_route(server_url, lone):
    with httpx.Client(base_url=server_url, timeout=60) as c:
        sid = _sid(c)
        for path, bodies in _bodies(sid, lone).items():
            for body in bodies:
                r = c.post(path, content=body.encode(), headers=JSON)
                assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text[:200])
                error = r.json()["detail"]["error"]
                assert "surrogate" in error and "\n" not in error and len(r.content) < 1000
        # the keep-alive connection and the session still work; nothing was stored
        assert c.post("/step", json={"session_id": sid, "action": {}}).status_code == 200
        assert c.get("/health").status_code == 200


def test_deep_nesting_is_422_on_every_route(server_url):
    deep = "[" * 5000 + "]" * 5000
    with httpx.Client(base_url=server_url, timeout=60) as c:
        sid = _sid(c)
        for path, bodies in _bodies(sid, deep).items():
            r = c.post(path, content=bodies[0].encode(), headers=JSON)
            assert r.status_code == 422 and "nests" in r.text, (path, r.status_code, r.text[:200])
        assert c.post("/step", json={"session_id": sid, "action": {}}).status_code == 200


def test_a_valid_surrogate_pair_is_still_accepted(server_url):
    with httpx.Client(base_url=server_url, timeout=60) as c:
        r = c.post("/reset", content='{"seed": 1, "episode_id": "run \\ud83d\\ude00"}'.encode(), headers=JSON)
        assert r.status_code == 200
        state = c.get("/state", params={"session_id": r.json()["session_id"]}).json()
        assert state["episode_id"] == "run \U0001F600"


def test_echoes_are_always_encodable_and_short():
    for value in ("\ud800" * 500, {"\udc00": ["x\ud800"]}, ["\ud83d"] * 3):
        safe = json_safe(value)
        text = json.dumps(safe, ensure_ascii=False)
        assert len(text.encode("utf-8")) < 400  # would raise UnicodeEncodeError on a lone surrogate
    for bad in (b'{"a": "\\ud800"}', b"[" * 40 + b"]" * 40, b"\xff\xfe", b'{"a": 1'):
        with pytest.raises(JSONGuardError):
            parse_json(bad)
    assert parse_json(b'{"a": "\\\\ud800", "b": "\\ud83d\\ude00"}') == {"a": "\\ud800", "b": "\U0001F600"}


# -- 2. forwarding headers only from configured proxies --------------------------------------------
@pytest.mark.parametrize("launcher", ["uvicorn defaults", "inferencegym launchers"])
def test_forged_forwarded_for_cannot_bypass_the_per_client_cap(launcher):
    opts = {} if launcher == "uvicorn defaults" else uvicorn_options()
    with live_server(build_app(max_sessions=8, max_sessions_per_client=2), **opts) as url, \
            httpx.Client(base_url=url, timeout=60) as c:
        codes = [c.post("/reset", json={}, headers={"X-Forwarded-For": f"10.0.0.{i}"}).status_code
                 for i in range(4)]
        assert codes == [200, 200, 429, 429], codes
        for forged in ({"X-Real-IP": "10.9.9.9"}, {"Forwarded": "for=10.8.8.8"}):
            assert c.post("/reset", json={}, headers=forged).status_code == 429
        with httpx.Client(base_url=url, timeout=60,
                          transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:
            assert other.post("/reset", json={}).status_code == 200  # an honest client still gets in


def test_a_configured_proxy_is_believed():
    limits = HTTPLimits(trusted_proxies=("127.0.0.1",))
    with live_server(build_app(max_sessions=8, max_sessions_per_client=2, limits=limits),
                     **uvicorn_options(limits)) as url, httpx.Client(base_url=url, timeout=60) as c:
        a = {"X-Forwarded-For": "203.0.113.1"}
        assert [c.post("/reset", json={}, headers=a).status_code for _ in range(3)] == [200, 200, 429]
        assert c.post("/reset", json={}, headers={"X-Forwarded-For": "203.0.113.2"}).status_code == 200


def test_client_key_rules():
    proxies = parse_proxies(["10.0.0.0/24"])
    scope = lambda peer, *h: {"client": (peer, 1), "headers": [(k.encode(), v.encode()) for k, v in h]}  # noqa: E731
    assert client_key(scope("1.2.3.4")) == "1.2.3.4"
    assert client_key(scope("1.2.3.4", ("x-forwarded-for", "5.6.7.8"))) == UNTRUSTED_FORWARDED
    assert client_key(scope("10.0.0.7", ("x-forwarded-for", "5.6.7.8, 10.0.0.9")), proxies) == "5.6.7.8"
    assert client_key(scope("10.0.0.7", ("forwarded", 'for="7.7.7.7";proto=http')), proxies) == "7.7.7.7"
    assert client_key(scope("9.9.9.9", ("x-forwarded-for", "5.6.7.8")), proxies) == UNTRUSTED_FORWARDED
    with pytest.raises(ValueError, match="not an IP address"):
        parse_proxies(["proxy.example"])


# -- 3. whole-episode routes never starve the cheap ones -------------------------------------------
def test_baseline_and_grader_floods_do_not_starve_reset_and_step(monkeypatch):
    def slow_episode(policy_name, task_id, seed):
        time.sleep(0.5)  # a whole episode, without burning the CPU the honest client needs
        return {"score": 0.5}

    def slow_replay(task_id, seed, actions):
        time.sleep(0.5)
        raise ReplayError("replayed")

    monkeypatch.setattr(episodes, "run_baseline_episode", slow_episode)
    monkeypatch.setattr(episodes, "replay_grade", slow_replay)
    app = build_app(max_sessions=8, max_sessions_per_client=8, episode_processes=False)
    with live_server(app, **uvicorn_options()) as url:
        stop = threading.Event()
        codes: list[int] = []
        retry_after: set[str] = set()

        def flood(i: int) -> None:
            with httpx.Client(base_url=url, timeout=60) as f:
                while not stop.is_set():
                    if i % 2:
                        r = f.get("/baseline", params={"task_id": "static_workload", "policy": "heuristic",
                                                        "seed": i * 1000 + len(codes)})
                    else:
                        r = f.post("/grader", json={"task_id": "static_workload", "seed": i, "actions": []})
                    codes.append(r.status_code)
                    if r.status_code == 429:
                        retry_after.add(r.headers.get("retry-after", ""))
                        time.sleep(0.2)  # 48 requests stay outstanding without a CPU-bound loop

        with ThreadPoolExecutor(48) as ex, httpx.Client(base_url=url, timeout=60) as honest:
            futures = [ex.submit(flood, i) for i in range(48)]
            time.sleep(1.0)  # the flood is in full swing
            lat = []
            for _ in range(3):
                t0 = time.perf_counter()
                sid = _sid(honest)
                for _ in range(5):
                    assert honest.post("/step", json={"session_id": sid, "action": {}}).status_code == 200
                assert honest.get("/health").status_code == 200
                lat.append(time.perf_counter() - t0)
            stop.set()
            for fu in futures:
                fu.result()
    assert max(lat) < 3.0, lat  # before: every worker thread waited on the baseline gate (> 20 s)
    assert codes and max(codes) < 500 and 429 in codes, sorted(set(codes))
    assert retry_after and "" not in retry_after


# -- 4. WebSocket: the HTTP limits on every frame --------------------------------------------------
def _ws(url: str, source: str | None = None):
    uri = url.replace("http", "ws") + "/ws"
    if source is None:
        return connect(uri, max_size=None)
    sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), source_address=(source, 0))
    return connect(uri, sock=sock, max_size=None)


def _reply(ws) -> dict:
    return json.loads(ws.recv(timeout=60))


def _error(ws, frame: str | bytes) -> str:
    ws.send(frame)
    reply = _reply(ws)
    assert reply["type"] == "error", (str(frame)[:80], reply)
    return reply["data"]["message"]


MALFORMED = ["[]", "null", "5", '"reset"', "{", "[" * 3000 + "]" * 3000,
             '{"type": "reset", "data": ' + "[" * 100 + "]" * 100 + "}",
             '{"type": 5}', '{"type": "nope"}', '{"type": "reset", "data": []}', '{"type": "step"}',
             '{"type": "step", "data": null}', '{"type": "reset", "data": {"episode_id": "\\ud800"}}',
             '{"type": "\\udc00"}', '{"\\ud800": 1}']


def test_ws_malformed_frames_get_error_frames_and_the_session_goes_on(server_url):
    with _ws(server_url) as ws:
        ws.send('{"type": "reset", "data": {"seed": 3}}')
        assert _reply(ws)["type"] == "observation"
        for frame in MALFORMED:
            assert "\n" not in _error(ws, frame)
        _error(ws, b'{"type": "state"}')  # binary frames are refused too
        ws.send('{"type": "step", "data": {"batch_cap": 64}}')
        reply = _reply(ws)
        assert reply["type"] == "observation" and reply["data"]["observation"]["step"] == 1


def test_ws_frames_get_the_http_bounds(server_url):
    limit = HTTPLimits().max_body_bytes
    with _ws(server_url) as ws:
        msg = _error(ws, '{"type": "reset", "data": {"episode_id": "' + "x" * (limit + 10) + '"}}')
        assert "exceeds" in msg and str(limit) in msg and len(msg) < 300
        assert "episode_id" in _error(ws, json.dumps({"type": "reset", "data": {"episode_id": "x" * 129}}))
        for seed in (2**32, -1, int("9" * 1000), "5", True, 5.0):
            text = '{"type": "reset", "data": {"seed": ' + (json.dumps(seed) if not isinstance(seed, int)
                                                            or isinstance(seed, bool) else str(seed)) + "}}"
            assert "seed" in _error(ws, text), seed
        assert "session_id" in _error(ws, '{"type": "reset", "data": {"session_id": "abc"}}')
        assert "batch_cap" in _error(ws, '{"type": "step", "data": {"batch_cap": "64"}}')
        ws.send(json.dumps({"type": "reset", "data": {"seed": 2**32 - 1, "episode_id": "y" * 128}}))
        assert _reply(ws)["type"] == "observation"
        ws.send('{"type": "state"}')
        state = _reply(ws)["data"]
        assert state["seed"] == 2**32 - 1 and state["episode_id"] == "y" * 128


def test_ws_one_client_cannot_hold_every_socket():
    with live_server(build_app(max_sessions=8, max_sessions_per_client=2), **uvicorn_options()) as url:
        with _ws(url) as a, _ws(url) as b:
            for ws in (a, b):
                ws.send('{"type": "reset", "data": {"seed": 1}}')
                assert _reply(ws)["type"] == "observation"
            with _ws(url) as third:
                refused = _reply(third)
                assert refused["type"] == "error" and refused["data"]["code"] == "CAPACITY_REACHED"
                assert "per-client" in refused["data"]["message"]
                with pytest.raises(Exception):  # closed by the server (1013)
                    third.recv(timeout=10)
            with _ws(url, source="127.0.0.2") as other:  # another client still gets a session
                other.send('{"type": "reset", "data": {"seed": 1}}')
                assert _reply(other)["type"] == "observation"
        with _ws(url) as again:  # the slots came back when the sockets closed
            again.send('{"type": "reset", "data": {"seed": 1}}')
            assert _reply(again)["type"] == "observation"


def test_episode_worker_processes_end_with_the_pool():
    """A killed or stopped server must not leave its episode worker behind (each holds ~200 MB)."""
    import asyncio
    import os

    from inferencegym.apps.env_server.limits import EpisodePool

    pool = EpisodePool("test", workers=1, max_queued=0, processes=True)
    shared = EpisodePool("shared", workers=1, max_queued=0, share_with=pool)
    pid = asyncio.run(pool.run(os.getpid))
    assert pid != os.getpid() and asyncio.run(shared.run(os.getpid)) == pid  # one worker for both
    shared.shutdown()
    pool.shutdown()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
