"""Fuzz the OpenEnv server's HTTP API from its own OpenAPI schema (schemathesis): no 5xx, ever,
also with non-finite literals, huge integers and oversized bodies (issue 17), lone surrogates and
deep nesting (issue 25); and its WebSocket session with arbitrary, surrogate-laden, deep and
oversized frames: an error frame each, and the session goes on (issue 25).

Real HTTP against uvicorn on 127.0.0.1. Bounded: a few dozen examples per operation.
``/baseline`` is left out (a valid request legitimately runs whole episodes: slow, not fuzzable in
budget; it has its own tests) and so is the SDK's MCP route (JSON-RPC errors are 200 by design).
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from fakes.live import live_server
from inferencegym.apps.env_server.app import build_app


@pytest.fixture(scope="module")
def server_url():
    with live_server(build_app(max_sessions=8, max_sessions_per_client=8, idle_timeout_s=600,
                               episode_processes=False)) as url:
        yield url


def _operations(server_url):
    schema = schemathesis.openapi.from_url(f"{server_url}/openapi.json")
    schema = schema.exclude(path_regex=r"^/(baseline|mcp)$")
    ops = []
    for result in schema.get_all_operations():
        ops.append(result.ok())
    return ops


def test_no_server_errors_on_schema_generated_requests():
    from hypothesis import given

    with live_server(build_app(max_sessions=32, max_sessions_per_client=32, idle_timeout_s=600,
                               episode_processes=False)) as server_url:
        _fuzz_schema(server_url, given)


def _fuzz_schema(server_url, given):
    ops = _operations(server_url)
    seen = {f"{op.method.upper()} {op.path}" for op in ops}
    assert {"POST /reset", "POST /step", "GET /state", "POST /grader"} <= seen
    for op in ops:
        @settings(max_examples=25, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
        @given(case=op.as_strategy())
        def check(case):
            response = case.call(base_url=server_url, timeout=60)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}")

        check()


@pytest.mark.parametrize("path", ["/reset", "/step", "/grader", "/suggest"])
def test_arbitrary_json_bodies_never_5xx(server_url, path):
    """Arbitrary JSON (not only schema-shaped) on the POST routes: 2xx/4xx, never 5xx."""
    from hypothesis import given
    from hypothesis import strategies as st

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
            st.sampled_from(["seed", "task_id", "session_id", "action", "batch_cap", "policy",
                             "episode_log", "windows", "x"]), inner, max_size=4),
        max_leaves=12)

    with httpx.Client(base_url=server_url, timeout=60) as c:
        sid = c.post("/reset", json={"seed": 0}).json()["session_id"]

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(body=json_values, use_sid=st.booleans())
        def check(body, use_sid):
            if use_sid and isinstance(body, dict) and path != "/reset":
                body = {**body, "session_id": sid}
            r = c.post(path, json=body)
            assert r.status_code < 500, f"{path} {body!r} -> {r.status_code}: {r.text[:300]}"
            if path == "/reset" and r.status_code == 200:
                c.delete(f"/sessions/{r.json()['session_id']}")

        check()


# -- issue 17: non-finite literals, huge integers and oversized bodies on every POST route ------------
BAD_LITERALS = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 401, "-" + "9" * 401, "1e39",
                '"\\ud800"', '"x\\udfff"', '"\\ud83d"', "[" * 3000 + "]" * 3000, "{\"a\": " * 50 + "1" + "}" * 50)
_MARK = "__BAD_LITERAL__"


def _poison(value, path_choice: int):
    """Replace one leaf of a JSON value (chosen by ``path_choice``) with the marker string."""
    leaves = []

    def walk(v, setter):
        if isinstance(v, dict):
            for k in list(v):
                walk(v[k], lambda x, k=k, v=v: v.__setitem__(k, x))
        elif isinstance(v, list):
            for i in range(len(v)):
                walk(v[i], lambda x, i=i, v=v: v.__setitem__(i, x))
        else:
            leaves.append(setter)

    walk(value, None)
    leaves = [s for s in leaves if s is not None]
    if not leaves:
        return None
    leaves[path_choice % len(leaves)](_MARK)
    return value


def test_schema_bodies_with_non_finite_and_huge_literals_never_5xx():
    """Schema-generated bodies of every POST route with one leaf replaced by NaN, +-Infinity,
    1e400, a 401-digit integer, 1e39, a string holding a lone surrogate or a deeply nested value
    (the raw JSON text, as a hostile client sends it): 4xx with a JSON reason, never 5xx, and the
    keep-alive connection keeps working."""
    import copy
    import json

    from hypothesis import given
    from hypothesis import strategies as st

    with live_server(build_app(max_sessions=32, max_sessions_per_client=32, idle_timeout_s=600,
                               episode_processes=False)) as url, \
            httpx.Client(base_url=url, timeout=60) as c:
        ops = [op for op in _operations(url) if op.method.upper() == "POST"]
        assert {"/reset", "/step", "/grader", "/suggest"} <= {op.path for op in ops}
        sid = c.post("/reset", json={"seed": 0}).json()["session_id"]
        for op in ops:
            @settings(max_examples=15, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
            @given(case=op.as_strategy(), lit=st.sampled_from(BAD_LITERALS), where=st.integers(0, 50))
            def check(case, lit, where):
                body = copy.deepcopy(case.body) if isinstance(case.body, (dict, list)) else {"seed": 0}
                if isinstance(body, dict) and "session_id" in body:
                    body["session_id"] = sid
                poisoned = _poison(body, where) or {"seed": _MARK}
                text = json.dumps(poisoned).replace(json.dumps(_MARK), lit)
                path = case.formatted_path
                r = c.post(path, content=text.encode(), headers={"content-type": "application/json"})
                assert r.status_code < 500, f"POST {path} {text[:200]} -> {r.status_code}: {r.text[:300]}"
                if r.status_code >= 400:
                    r.json()  # a JSON reason (FastAPI's default handler used to fail to encode it)
                    assert len(r.content) < 5000
                if path == "/reset" and r.status_code == 200:
                    c.delete(f"/sessions/{r.json()['session_id']}")

            check()
        assert c.get("/health").status_code == 200


@pytest.mark.parametrize("path", ["/reset", "/step", "/grader", "/suggest", "/inferencegym/task"])
def test_oversized_bodies_are_413_never_5xx(server_url, path):
    from inferencegym.apps.http_security import HTTPLimits

    limit = HTTPLimits().max_body_bytes
    body = b'{"x": "' + b"a" * (limit + 10) + b'"}'
    with httpx.Client(base_url=server_url, timeout=60) as c:
        r = c.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413 and len(r.content) < 1000
        streamed = c.post(path, content=iter([body[i:i + 65536] for i in range(0, len(body), 65536)]),
                          headers={"content-type": "application/json"})
        assert streamed.status_code == 413
        assert c.get("/health").status_code == 200


# -- issue 25: the WebSocket channel --------------------------------------------------------------
def test_websocket_frames_fuzz_never_end_the_session():
    """Arbitrary JSON frames (any type, strings with lone surrogates, deep nesting, wrong types in
    reset/step data) and oversized frames on one ``/ws`` session: each is answered by exactly one
    frame (an error or a result), and a valid reset and step still work at the end."""
    import json

    from hypothesis import given
    from hypothesis import strategies as st
    from websockets.sync.client import connect

    from inferencegym.apps.env_server.app import uvicorn_options
    from inferencegym.apps.http_security import HTTPLimits

    texts = st.text(max_size=8) | st.sampled_from(["\ud800", "a\udc00", "\ud83d"])
    leaves = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | texts
    values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "data", "seed", "episode_id", "task_id", "batch_cap", "\ud800"]) | texts,
        inner, max_size=3), max_leaves=10)
    frames = (values
              | st.builds(lambda t, d: {"type": t, "data": d},
                          st.sampled_from(["reset", "step", "state", "mcp", "close!", ""]), values)
              | st.integers(40, 400).map(lambda n: ("raw", "[" * n + "]" * n)))
    limit = HTTPLimits().max_body_bytes
    with live_server(build_app(max_sessions=4, max_sessions_per_client=4), **uvicorn_options()) as url, \
            connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:
        ws.send('{"type": "reset", "data": {"seed": 7}}')
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"

        @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(frame=frames)
        def check(frame):
            if isinstance(frame, dict) and frame.get("type") in ("close", "close!"):
                frame = {**frame, "type": "close!"}  # a real "close" would end the session on purpose
            raw = isinstance(frame, tuple)
            text = frame[1] if raw else json.dumps(frame)  # ensure_ascii: surrogates as \\uXXXX escapes
            ws.send(text)
            reply = json.loads(ws.recv(timeout=60))
            assert reply["type"] in ("error", "observation", "state", "mcp"), reply

        check()
        for big in ('"' + "x" * (limit + 1) + '"', json.dumps({"type": "reset", "data": {"episode_id": "y" * limit}})):
            ws.send(big)
            reply = json.loads(ws.recv(timeout=60))
            assert reply["type"] == "error" and "exceeds" in reply["data"]["message"]
        ws.send('{"type": "reset", "data": {"seed": 8}}')
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
        ws.send('{"type": "step", "data": {}}')
        assert json.loads(ws.recv(timeout=60))["data"]["observation"]["step"] == 1
