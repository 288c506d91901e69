"""Issue 17 on the OpenEnv server, through real HTTP: privileged policies refused, an unforgeable
grader, non-finite numbers and huge integers -> 422, body-size limit, per-client session cap,
session ids out of the access log, Host check, strict action types, API key, /metrics, bounded
/baseline. Each test failed before the fix."""

from __future__ import annotations

import logging
import socket

import httpx
import pytest

from fakes.live import live_server
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.apps.env_server.app import build_app
from inferencegym.apps.env_server.limits import BusyError, EpisodePool, ResultCache
from inferencegym.apps.http_security import API_KEY_ENV, HTTPLimits, RedactSessionIds

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server_url():
    with live_server(build_app(max_sessions=32, idle_timeout_s=600, max_sessions_per_client=32,
                               limits=HTTPLimits(max_body_bytes=200_000), episode_processes=False)) as url:
        yield url


@pytest.fixture()
def http(server_url):
    with httpx.Client(base_url=server_url, timeout=60) as c:
        yield c


def _sid(http, **body):
    r = http.post("/reset", json=body)
    assert r.status_code == 200, r.text
    return r.json()["session_id"]


# -- 1. privileged policies --------------------------------------------------------------------
def test_privileged_policies_are_refused_on_every_route(http):
    sid = _sid(http, seed=1000, task_id="adversarial_multitenant")
    r = http.post("/suggest", json={"session_id": sid, "policy": "clairvoyant"})
    assert r.status_code == 403 and "privileged" in r.text
    r = http.get("/baseline", params={"policy": "clairvoyant", "task_id": "static_workload"})
    assert r.status_code == 403 and "privileged" in r.text
    assert "clairvoyant" not in http.get("/tasks").json()["policies"]
    # nothing the agent receives carries the hidden future
    step = http.post("/step", json={"session_id": sid, "action": {}}).json()
    assert "oracle" not in str(step) and "phase" not in str(step["observation"]["raw"])


# -- 2. the grader ------------------------------------------------------------------------------
def test_forged_logs_are_refused_and_replay_matches_the_session(http):
    forged = {"task_id": "static_workload", "windows": [
        {"step": 0, "offered_tokens": [1.0], "good_tokens": [1.0], "produced_tokens": 1.0,
         "window_usd": 0.0, "quality_delta": 0.0}]}
    r = http.post("/grader", json={"task_id": "static_workload", "episode_log": forged})
    assert r.status_code == 422 and "score" not in r.json()
    sid = _sid(http, seed=9, task_id="bursty_workload")
    actions = [{"batch_cap": 32 * (1 + i % 4), "kv_budget_fraction": 0.8} for i in range(12)]
    for a in actions:
        assert http.post("/step", json={"session_id": sid, "action": a}).status_code == 200
    by_session = http.post("/grader", json={"session_id": sid}).json()
    by_replay = http.post("/grader", json={"task_id": "bursty_workload", "seed": 9, "actions": actions}).json()
    assert by_session["score"] == by_replay["score"] and by_session["steps"] == by_replay["steps"] == 12
    assert http.post("/grader", json={"task_id": "bursty_workload", "seed": 9,
                                      "actions": [{}] * 1001}).status_code == 422


# -- 4. non-finite numbers and huge integers --------------------------------------------------
BAD_LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", "9" * 401, "-" + "9" * 401]


@pytest.mark.parametrize("lit", BAD_LITERALS)
def test_non_finite_and_huge_numbers_are_422_on_every_route(http, lit):
    sid = _sid(http, seed=0)
    bodies = {
        "/reset": f'{{"seed": {lit}}}',
        "/step": f'{{"session_id": "{sid}", "action": {{"batch_cap": {lit}}}}}',
        "/grader": f'{{"task_id": "static_workload", "seed": {lit}, "actions": []}}',
        "/suggest": f'{{"session_id": "{sid}", "policy": {lit}}}',
        "/inferencegym/task": f'{{"split": "test", "index": {lit}}}',
    }
    for path, body in bodies.items():
        r = http.post(path, content=body.encode(), headers=JSON)
        if path == "/inferencegym/task" and lit.lstrip("-").isdigit():
            # OpenEnv's Task API: a well-formed but out-of-range index is its 400 "Invalid task index"
            assert r.status_code == 400 and "index" in r.text, r.text[:300]
            continue
        assert r.status_code == 422, (path, r.status_code, r.text[:300])
        detail = r.json()["detail"]
        assert detail and len(r.content) < 3000, path  # a reason, never the whole input
    q = http.get("/state", params={"session_id": "x" * 5000})
    assert q.status_code == 422 and len(q.content) < 3000
    # the keep-alive connection still works afterwards
    assert http.get("/health").status_code == 200
    assert http.post("/step", json={"session_id": sid, "action": {}}).status_code == 200


def test_strict_types_are_not_coerced_into_actions(http):
    sid = _sid(http, seed=0)
    for bad in ({"batch_cap": "64"}, {"batch_cap": True}, {"batch_cap": 64.0},
                {"priority_routing": "yes"}, {"prefill_decode_split": 1}, {"kv_budget_fraction": "0.5"}):
        r = http.post("/step", json={"session_id": sid, "action": bad})
        assert r.status_code == 422, (bad, r.text)
    assert http.get("/state", params={"session_id": sid}).json()["step_count"] == 0
    for bad in ({"seed": "5"}, {"seed": True}, {"seed": 5.0}, {"task_id": 3}):
        assert http.post("/reset", json=bad).status_code == 422, bad
    ok = http.post("/step", json={"session_id": sid, "action": {"batch_cap": 64, "kv_budget_fraction": 1}})
    assert ok.status_code == 200


# -- 5. body size ----------------------------------------------------------------------------------
def test_oversized_bodies_get_413_without_an_echo(http):
    big = b'{"task_id": "' + b"x" * 300_000 + b'"}'
    r = http.post("/grader", content=big, headers=JSON)
    assert r.status_code == 413 and len(r.content) < 1000
    chunks = iter([big[i:i + 16384] for i in range(0, len(big), 16384)])  # no Content-Length
    r = httpx.post(f"{str(http.base_url).rstrip('/')}/grader", content=chunks, headers=JSON, timeout=30)
    assert r.status_code == 413
    r = http.post("/reset", content=b'{"task_id": "' + b"y" * 150_000 + b'"}', headers=JSON)
    assert r.status_code == 422 and len(r.content) < 3000  # under the limit: refused, not echoed
    assert http.get("/health").status_code == 200


# -- 6. hygiene -------------------------------------------------------------------------------------
def _client_from(url: str, source: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=60,
                        transport=httpx.HTTPTransport(local_address=source))


def test_one_client_cannot_take_every_session():
    with live_server(build_app(max_sessions=6, max_sessions_per_client=2, idle_timeout_s=600)) as url:
        with _client_from(url, "127.0.0.2") as greedy, _client_from(url, "127.0.0.3") as other:
            assert greedy.post("/reset", json={}).status_code == 200
            assert greedy.post("/reset", json={}).status_code == 200
            r = greedy.post("/reset", json={})
            assert r.status_code == 429 and "per-client" in r.text
            assert other.post("/reset", json={}).status_code == 200


def test_access_log_has_no_session_ids(caplog):
    f = RedactSessionIds()
    rec = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                            ("127.0.0.1:5", "GET", "/state?session_id=abcdef0123&x=1", "1.1", 200), None)
    f.filter(rec)
    assert "abcdef0123" not in rec.getMessage() and "session_id=<redacted>" in rec.getMessage()
    rec = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                            ("127.0.0.1:5", "DELETE", "/sessions/abcdef0123", "1.1", 200), None)
    f.filter(rec)
    assert "abcdef0123" not in rec.getMessage()
    # installed on uvicorn's access logger by build_app
    build_app(max_sessions=1)
    assert any(isinstance(x, RedactSessionIds) for x in logging.getLogger("uvicorn.access").filters)


def test_host_header_is_checked(http, server_url):
    assert http.get("/health", headers={"host": "evil.example:7860"}).status_code == 400
    assert http.get("/health", headers={"host": "localhost:7860"}).status_code == 200
    with live_server(build_app(max_sessions=2, limits=HTTPLimits(allowed_hosts=("gym.example",)))) as url:
        assert httpx.get(f"{url}/health").status_code == 400
        assert httpx.get(f"{url}/health", headers={"host": "gym.example"}).status_code == 200


def test_api_key_from_the_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "s3cret-key")
    with live_server(build_app(max_sessions=2)) as url, httpx.Client(base_url=url, timeout=30) as c:
        assert c.get("/health").status_code == 200  # liveness stays open
        assert c.post("/reset", json={}).status_code == 401
        assert c.get("/tasks", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/tasks", headers={"Authorization": "Bearer s3cret-key"}).status_code == 200
        assert c.post("/reset", json={}, headers={"X-API-Key": "s3cret-key"}).status_code == 200


def test_metrics_endpoint(http):
    http.get("/tasks")
    m = http.get("/metrics")
    assert m.status_code == 200
    assert 'inferencegym_env_http_requests_total{method="GET",route="/tasks",status="200"}' in m.text
    assert "inferencegym_env_sessions_active" in m.text
    # labels are route templates, never raw paths carrying ids
    http.delete("/sessions/secret-id-123")
    assert "secret-id-123" not in http.get("/metrics").text


def test_episode_pool_and_result_cache_are_bounded():
    import asyncio
    import threading

    cache = ResultCache(2)
    for k in range(4):
        cache.put(k, k)
    assert len(cache) == 2 and cache.get(3) == 3 and cache.get(0) is None  # LRU kept the newest

    pool = EpisodePool("test", workers=1, max_queued=1, retry_after_s=3)
    release = threading.Event()

    async def scenario():
        first = asyncio.ensure_future(pool.run(lambda: release.wait(10) and 1))
        second = asyncio.ensure_future(pool.run(lambda: 2))
        await asyncio.sleep(0.05)
        assert pool.admitted == 2
        with pytest.raises(BusyError) as busy:  # refused at once, not after a wait
            await asyncio.wait_for(pool.run(lambda: 3), timeout=1)
        assert busy.value.retry_after_s == 3
        release.set()
        assert await first == 1 and await second == 2 and pool.admitted == 0

    asyncio.run(scenario())
    pool.shutdown()


def test_socket_bind_to_other_loopback_addresses_works():
    """The per-client test relies on 127.0.0.x source addresses (Linux loopback is a /8)."""
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))


def test_privileged_env_flag_is_strict():
    with pytest.raises(TypeError):
        LLMServeEnv("static_workload", privileged="yes")


def test_websocket_route_refuses_bad_numbers_and_keeps_the_session(server_url):
    """OpenEnv's WebSocket session (/ws): NaN, Infinity, huge integers and "64" are error messages,
    the session goes on, and its observations carry no oracle."""
    from websockets.sync.client import connect

    with connect(server_url.replace("http", "ws") + "/ws") as ws:
        ws.send('{"type": "reset", "data": {"seed": 1, "task_id": "adversarial_multitenant"}}')
        assert '"observation"' in ws.recv(timeout=60)
        for data in ('{"batch_cap": NaN}', '{"batch_cap": "64"}', '{"batch_cap": ' + "9" * 401 + "}",
                     '{"priority_routing": "yes"}'):
            ws.send('{"type": "step", "data": ' + data + "}")
            reply = ws.recv(timeout=60)
            assert '"error"' in reply, (data, reply[:200])
        ws.send('{"type": "step", "data": {"batch_cap": 64}}')
        reply = ws.recv(timeout=60)
        assert '"step":1' in reply and "oracle" not in reply
