"""Fuzz the OpenEnv server's HTTP API from its own OpenAPI schema (schemathesis): no 5xx, ever.

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
from inferencegym.server.app import build_app


@pytest.fixture(scope="module")
def server_url():
    with live_server(build_app(max_sessions=8, max_sessions_per_client=8, idle_timeout_s=600)) as url:
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

    with live_server(build_app(max_sessions=32, max_sessions_per_client=32, idle_timeout_s=600)) as server_url:
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
