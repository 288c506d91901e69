"""The InferenceGym OpenEnv server: OpenEnv's standard endpoints with real HTTP sessions, plus
``/tasks``, ``/grader``, ``/baseline`` and a web page at ``/web``.

Built on ``openenv.core.env_server.http_server.create_app`` (health, metadata, schema, MCP, the
WebSocket session ``/ws`` and the Task API come from the SDK). The SDK's HTTP ``/reset``, ``/step``
and ``/state`` are stateless (a fresh env per request) and FastAPI's first registered route wins, so
they are REMOVED here and replaced by session-backed ones:

* ``POST /reset`` ``{"seed"?, "task_id"?, "session_id"?, "episode_id"?}`` (``{}`` works) -> the
  OpenEnv reset payload plus ``"session_id"`` at the top level. Passing an existing ``session_id``
  starts a new episode in that session; otherwise a new session is created.
* ``POST /step`` ``{"session_id", "action": {...}}`` -> the OpenEnv step payload plus ``session_id``.
* ``GET /state?session_id=...`` -> the session's :class:`InferenceGymState`.
* ``DELETE /sessions/{session_id}`` closes a session; ``GET /sessions`` shows the counts.

Sessions are isolated (one env each), bounded (``max_sessions``; a full server answers 429 with what
to do) and expire after ``idle_timeout_s`` without use.

Run: ``inferencegym server [--host 127.0.0.1] [--port 7860]`` or ``python -m inferencegym.apps.env_server.app``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from importlib import resources
from typing import Any

from fastapi import Body, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import ConcurrencyConfig

from inferencegym.apps.env_server import episodes
from inferencegym.apps.env_server.bodies import (
    MAX_GRADER_ACTIONS,  # noqa: F401  (re-exported: docs/threat_model.md names it here)
    ResetBody,
    StepBody,
    validate_ws_frame,
)
from inferencegym.apps.env_server.environment import (
    ENV_NAME,
    EpisodeOverError,
    InferenceGymAction,
    InferenceGymEnvironment,
    InferenceGymObservation,
    InferenceGymState,
    InvalidActionError,
    NotResetError,
    single_task_ids,
)
from inferencegym.apps.env_server.grading import (  # noqa: F401  (re-exported names)
    BASELINE_POLICIES,
    MAX_BASELINE_EPISODES,
    add_grading_routes,
)
from inferencegym.apps.env_server.limits import EpisodePool, ResultCache
from inferencegym.apps.env_server.responses import err, finite
from inferencegym.apps.env_server.sessions import SessionLimitError, SessionStore, UnknownSessionError
from inferencegym.apps.http_security import HTTPLimits, harden_app, metrics_response
from inferencegym.apps.peers import client_key

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
DEFAULT_MAX_SESSIONS = 64
DEFAULT_IDLE_TIMEOUT_S = 600.0

# ---------------------------------------------------------------------------------------------
def _remove_routes(app: FastAPI, targets: set[tuple[str, str]]) -> int:
    """Drop the SDK's HTTP routes ``(path, method)`` so ours are the ones FastAPI dispatches to."""
    kept, removed = [], 0
    for route in app.router.routes:
        if isinstance(route, APIRoute) and any((route.path, m) in targets for m in route.methods):
            removed += 1
            continue
        kept.append(route)
    app.router.routes[:] = kept
    app.openapi_schema = None
    return removed


def _remove_prefix(app: FastAPI, prefix: str) -> None:
    """Drop routes/mounts under ``prefix`` (OpenEnv's Gradio UI when ENABLE_WEB_INTERFACE is set)."""
    app.router.routes[:] = [r for r in app.router.routes
                            if not getattr(r, "path", "").startswith(prefix)]


def _payload(obs: InferenceGymObservation, session_id: str) -> dict[str, Any]:
    """OpenEnv's wire format plus ``session_id``; non-finite numbers become null (JSON has no NaN)."""
    out = serialize_observation(obs)
    return finite({"session_id": session_id, **out})



# ---------------------------------------------------------------------------------------------
def build_app(*, max_sessions: int = DEFAULT_MAX_SESSIONS,
              idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
              max_sessions_per_client: int | None = None,
              limits: HTTPLimits | None = None,
              episode_processes: bool = True) -> FastAPI:
    """The FastAPI app (see the module docstring).

    Args:
        max_sessions: live HTTP sessions at most (the WebSocket route has the same bound, separately).
        idle_timeout_s: an HTTP or WebSocket-less session unused this long is closed.
        max_sessions_per_client: live sessions one client address may hold (default: half of
            ``max_sessions``, at least 1), so one client cannot take every slot.
        limits: body size, allowed Host names, API-key variable, metrics (see
            :class:`~inferencegym.apps.http_security.HTTPLimits`; docs/threat_model.md).
        episode_processes: run ``/baseline`` and ``/grader`` replays in a separate, lower-priority
            process (started at the first such request), so they never hold the server's GIL;
            False runs them on the pools' own threads (tests).
    """
    limits = limits or HTTPLimits()
    if max_sessions_per_client is None:
        max_sessions_per_client = max(1, max_sessions // 2)
    app = create_app(
        InferenceGymEnvironment, InferenceGymAction, InferenceGymObservation,
        env_name=ENV_NAME,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                             session_timeout=idle_timeout_s),
        state_cls=InferenceGymState,
    )
    app.title = "InferenceGym OpenEnv server"
    simulation = os.environ.get("OPENENV_MODE", "simulation").lower() == "simulation"
    removed = _remove_routes(app, {("/reset", "POST"), ("/step", "POST"), ("/state", "GET")})
    if removed != 3 and simulation:
        raise RuntimeError(f"expected to replace OpenEnv's /reset, /step, /state routes, found {removed}; "
                           f"the openenv version changed: check inferencegym/apps/env_server/app.py")
    _remove_prefix(app, "/web")

    store = SessionStore(InferenceGymEnvironment, max_sessions=max_sessions,
                         idle_timeout_s=idle_timeout_s, max_per_client=max_sessions_per_client)
    app.state.sessions = store
    # whole episodes run in their own pools, never on the threads of the cheap routes
    baseline_pool = EpisodePool("baseline", workers=1, max_queued=2, retry_after_s=5,
                                processes=episode_processes, initializer=episodes.child_init)
    replay_pool = EpisodePool("grader replay", workers=1, max_queued=2, retry_after_s=2,
                              share_with=baseline_pool)  # one worker process for both
    baseline_cache = ResultCache(256)
    app.state.episode_pools = (baseline_pool, replay_pool)
    proxies = limits.proxy_networks
    registry = harden_app(app, limits, metrics_prefix="inferencegym_env",
                          ws_max_per_client=max_sessions_per_client,
                          ws_validators={"/ws": validate_ws_frame})
    if registry is not None:
        from prometheus_client import Gauge

        Gauge("inferencegym_env_sessions_active", "live HTTP sessions", registry=registry
              ).set_function(lambda: len(store))

        @app.get("/metrics", tags=["Environment Info"], summary="Prometheus metrics")
        def metrics():
            return metrics_response(registry)

    def _get(session_id: str):
        try:
            return store.get(session_id)
        except UnknownSessionError as exc:
            raise err(404, str(exc)) from None

    # -- the OpenEnv control endpoints, with sessions ------------------------------------
    @app.post("/reset", tags=["Environment Control"], summary="Start an episode (creates a session)")
    def reset(request: Request, body: ResetBody = Body(default_factory=ResetBody)) -> dict[str, Any]:
        task_id = body.task_id
        if task_id is not None and task_id not in single_task_ids():
            raise err(422, f"unknown task {task_id!r}; valid: {', '.join(single_task_ids())}",
                       field="task_id")
        if body.session_id is not None:
            sess = _get(body.session_id)
            created = False
        else:
            try:
                sess = store.create(owner=client_key(request.scope, proxies))
            except SessionLimitError as exc:
                raise HTTPException(status_code=429, detail={"error": str(exc), **store.stats()},
                                    headers={"Retry-After": "30"}) from None
            created = True
        try:
            with sess.lock:
                obs = sess.env.reset(seed=body.seed, episode_id=body.episode_id, task_id=task_id,
                                     split=body.split, index=body.index)
        except ValueError as exc:
            if created:
                store.close(sess.session_id)
            raise err(422, str(exc)) from None
        return _payload(obs, sess.session_id)

    @app.post("/step", tags=["Environment Control"], summary="Apply a serving configuration for one window")
    def step(body: StepBody) -> dict[str, Any]:
        sess = _get(body.session_id)
        try:
            with sess.lock:
                obs = sess.env.step(body.action)
        except InvalidActionError as exc:
            raise err(422, str(exc), field="action") from None
        except (EpisodeOverError, NotResetError) as exc:
            raise err(409, str(exc)) from None
        return _payload(obs, sess.session_id)

    @app.get("/state", tags=["State Management"], summary="The session's episode state",
             response_model=InferenceGymState)
    def state(session_id: str = Query(..., min_length=1, max_length=128,
                                      description="id returned by POST /reset")) -> InferenceGymState:
        return _get(session_id).env.state

    @app.get("/sessions", tags=["State Management"], summary="Session counts and limits")
    def sessions() -> dict[str, Any]:
        store.expire_idle()
        return store.stats()

    @app.delete("/sessions/{session_id}", tags=["State Management"], summary="Close a session")
    def close_session(session_id: str) -> dict[str, Any]:
        try:
            store.close(session_id)
        except UnknownSessionError as exc:
            raise err(404, str(exc)) from None
        return {"closed": session_id}

    # -- tasks, grader, baseline, suggest (grading.py) -------------------------------------
    add_grading_routes(app, get_session=_get, replay_pool=replay_pool, baseline_pool=baseline_pool,
                       baseline_cache=baseline_cache)

    if not simulation:  # OPENENV_MODE=production: no control endpoints, as OpenEnv does
        _remove_routes(app, {("/reset", "POST"), ("/step", "POST"), ("/state", "GET")})

    # -- web page -------------------------------------------------------------------------
    static_dir = resources.files("inferencegym.apps.env_server") / "static"
    app.mount("/web/static", StaticFiles(directory=str(static_dir)), name="web-static")

    @app.get("/web", include_in_schema=False)
    def web() -> FileResponse:
        return FileResponse(str(static_dir / "index.html"), media_type="text/html")

    @app.get("/web/", include_in_schema=False)
    def web_slash() -> RedirectResponse:
        return RedirectResponse("/web")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/web")

    # -- idle expiry in the background ----------------------------------------------------
    async def _reaper() -> None:
        interval = max(1.0, min(60.0, idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            await run_in_threadpool(store.expire_idle)

    reaper_task: dict[str, asyncio.Task] = {}

    async def _start_reaper() -> None:
        reaper_task["t"] = asyncio.create_task(_reaper())

    async def _stop_reaper() -> None:
        t = reaper_task.pop("t", None)
        if t is not None:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        store.close_all()
        for pool in (baseline_pool, replay_pool):
            pool.shutdown()

    app.router.on_startup.append(_start_reaper)
    app.router.on_shutdown.append(_stop_reaper)

    @app.exception_handler(SessionLimitError)
    async def _limit_handler(request: Request, exc: SessionLimitError) -> JSONResponse:
        return JSONResponse(status_code=429, content={"detail": {"error": str(exc)}})

    return app


def uvicorn_options(limits: HTTPLimits | None = None) -> dict[str, Any]:
    """Options every launcher passes to ``uvicorn.run`` with this app.

    ``proxy_headers=False``: uvicorn would otherwise believe ``X-Forwarded-For`` from loopback and
    rewrite the client address the per-client caps count (the app decides whom to trust:
    ``HTTPLimits.trusted_proxies``). ``ws_max_size``: the transport closes a WebSocket frame over
    twice the body limit (code 1009) before buffering it; smaller frames over the limit get an error
    frame from the app."""
    limits = limits or HTTPLimits()
    return {"proxy_headers": False, "ws_max_size": 2 * limits.max_body_bytes, "server_header": False}


def main(argv: list[str] | None = None) -> None:
    """``python -m inferencegym.apps.env_server.app [--host 127.0.0.1] [--port 7860]``."""
    import uvicorn

    p = argparse.ArgumentParser(description="InferenceGym OpenEnv server")
    p.add_argument("--host", default=os.environ.get("HOST", DEFAULT_HOST))
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", DEFAULT_PORT)))
    p.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS)
    p.add_argument("--idle-timeout-s", type=float, default=DEFAULT_IDLE_TIMEOUT_S)
    p.add_argument("--max-sessions-per-client", type=int, default=None)
    args = p.parse_args(argv)
    limits = HTTPLimits()
    uvicorn.run(build_app(max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout_s,
                          max_sessions_per_client=args.max_sessions_per_client, limits=limits),
                host=args.host, port=args.port, log_level="info", **uvicorn_options(limits))


def __getattr__(name: str) -> Any:
    # ``uvicorn inferencegym.apps.env_server.app:app`` (and openenv.yaml's ``app:``) without building the app
    # on every import of this module.
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(name)


if __name__ == "__main__":
    main()
