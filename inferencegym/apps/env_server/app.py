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
import math
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
from pydantic import BaseModel, ConfigDict, Field

from inferencegym.apps.env_server.environment import (
    DEFAULT_TASK_ID,
    ENV_NAME,
    EpisodeOverError,
    InferenceGymAction,
    InferenceGymEnvironment,
    InferenceGymObservation,
    InferenceGymState,
    InvalidActionError,
    NotResetError,
    single_task_ids,
    to_serve_action,
)
from inferencegym.apps.env_server.limits import BaselineGate, BusyError
from inferencegym.apps.env_server.sessions import SessionLimitError, SessionStore, UnknownSessionError
from inferencegym.apps.http_security import HTTPLimits, harden_app, metrics_response
from inferencegym.envs import list_tasks
from inferencegym.envs.actions import ServeAction
from inferencegym.envs.verifier import ReplayError, replay_grade
from inferencegym.policies import get_policy, is_privileged, list_policies

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
DEFAULT_MAX_SESSIONS = 64
MAX_GRADER_ACTIONS = 1000
"""Longest action list ``/grader`` accepts (the longest episode has 200 windows)."""
DEFAULT_IDLE_TIMEOUT_S = 600.0
BASELINE_POLICIES = ("static_default", "heuristic", "best_static")
"""Baselines shown by ``GET /baseline`` by default (deterministic policies only)."""
MAX_BASELINE_EPISODES = 5

SESSION_ID_FIELD = Field(..., min_length=1, max_length=128, description="id returned by POST /reset")


# ---------------------------------------------------------------------------------------------
# Request bodies (pydantic: a violating body gets 422 with the reason)
class ResetBody(BaseModel):
    """``POST /reset`` body; every field is optional (``{}`` starts a default episode)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, true not an int

    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="episode seed (drawn if omitted)")
    task_id: str | None = Field(None, max_length=128, description="task (default: static_workload)")
    session_id: str | None = Field(None, min_length=1, max_length=128,
                                   description="reuse this session instead of creating one")
    episode_id: str | None = Field(None, max_length=128, description="your label for the episode")
    split: str | None = Field(None, max_length=32, description="OpenEnv Task API split (\"test\")")
    index: int | None = Field(None, ge=0, le=10_000, description="OpenEnv Task API task index in the split")


class StepBody(BaseModel):
    """``POST /step`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, true not an int

    session_id: str = SESSION_ID_FIELD
    action: InferenceGymAction = Field(..., description="the serving configuration (see /schema)")
    timeout_s: float | None = Field(None, gt=0, description="accepted for OpenEnv compatibility; unused")
    request_id: str | None = Field(None, max_length=128, description="accepted for OpenEnv compatibility")


class GraderBody(BaseModel):
    """``POST /grader`` body: a ``session_id`` (grade that session's episode so far, from the
    server's own record) or a submitted episode ``task_id`` + ``seed`` + ``actions``, which the
    server replays (the simulator is deterministic) and grades on the log it wrote itself. A
    client-written log or metric is never graded."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, true not an int

    session_id: str | None = Field(None, min_length=1, max_length=128)
    task_id: str | None = Field(None, max_length=128)
    seed: int | None = Field(None, ge=0, le=2**32 - 1, strict=True,
                             description="the episode's seed (GET /state reports it)")
    actions: list[InferenceGymAction] | None = Field(
        None, max_length=MAX_GRADER_ACTIONS,
        description="the episode's actions in order (one per window; fewer grades the episode so far)")
    episode_log: Any = Field(None, description="no longer accepted (a client-written log is not "
                                               "graded): send task_id, seed and actions")


class SuggestBody(BaseModel):
    """``POST /suggest`` body: what a baseline policy would do in the session's current state."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" is not a seed, true not an int

    session_id: str = SESSION_ID_FIELD
    policy: str = Field("heuristic", min_length=1, max_length=64)


# ---------------------------------------------------------------------------------------------
def _err(status: int, msg: str, **extra: Any) -> HTTPException:
    return HTTPException(status_code=status, detail={"error": msg, **extra})


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
    return _finite({"session_id": session_id, **out})


def _finite(x: Any) -> Any:
    """JSON-safe numbers (NaN/inf -> None), recursively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _task_summary(spec: Any) -> dict[str, Any]:
    tenants = []
    for t in getattr(spec, "tenants", ()):
        tenants.append({"name": t.name, "priority": t.priority, "ttft_slo_s": t.ttft_slo_s,
                        "tbt_slo_s": t.tbt_slo_s, "grade_weight": t.grade_weight})
    return {"task_id": spec.task_id, "description": spec.description,
            "difficulty": getattr(spec, "difficulty", None), "kind": getattr(spec, "kind", "single"),
            "window_s": getattr(spec, "window_s", None),
            "episode_windows": getattr(spec, "episode_windows", None),
            "model": getattr(spec, "model", None), "gpu": getattr(spec, "gpu", None),
            "replicas": getattr(spec, "replicas", None), "tenants": tenants}


def _action_schema() -> dict[str, Any]:
    return ServeAction.model_json_schema()


class PolicyUnavailableError(RuntimeError):
    """A registered baseline that cannot be built for a task (e.g. data not shipped)."""


def _baseline_policy_names() -> list[str]:
    """Registry policies the server may run: not the LLM policy (it needs a key) and never a
    privileged one (``clairvoyant`` reads the hidden future; the registry marks it)."""
    return [p for p in list_policies(kind="single") if p != "llm" and not is_privileged(p)]


def _refuse_policy(name: str) -> HTTPException:
    if is_privileged(name):
        return _err(403, f"policy {name!r} is privileged (it reads the hidden workload future) and "
                         f"is never served to an agent; available: {', '.join(_baseline_policy_names())}",
                    field="policy")
    return _err(422, f"unknown policy {name!r:.80}; valid: {', '.join(_baseline_policy_names())}",
                field="policy")


def run_baseline_episode(policy_name: str, task_id: str, seed: int) -> dict[str, Any]:
    """One episode of a registry policy on the OpenEnv adapter (same env, same seed path as HTTP)."""
    try:
        policy = get_policy(policy_name, task_id)
    except ValueError as exc:
        raise PolicyUnavailableError(str(exc)) from None
    env = InferenceGymEnvironment(task_id)
    try:
        obs = env.reset(seed=seed, task_id=task_id)
        if callable(getattr(policy, "reset", None)):
            policy.reset(seed=seed)
        total = 0.0
        while not obs.done:
            action = policy.act(env.last_obs, env.last_info)
            obs = env.step(action)
            total += float(obs.reward or 0.0)
        return {"policy": policy_name, "task_id": task_id, "seed": seed, "score": obs.grade,
                "total_reward": total, "steps": env.state.step_count,
                "grade_breakdown": obs.grade_breakdown}
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------
def build_app(*, max_sessions: int = DEFAULT_MAX_SESSIONS,
              idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
              max_sessions_per_client: int | None = None,
              limits: HTTPLimits | None = None) -> FastAPI:
    """The FastAPI app (see the module docstring).

    Args:
        max_sessions: live HTTP sessions at most (the WebSocket route has the same bound, separately).
        idle_timeout_s: an HTTP or WebSocket-less session unused this long is closed.
        max_sessions_per_client: live sessions one client address may hold (default: half of
            ``max_sessions``, at least 1), so one client cannot take every slot.
        limits: body size, allowed Host names, API-key variable, metrics (see
            :class:`~inferencegym.apps.http_security.HTTPLimits`; docs/threat_model.md).
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
    baseline_gate = BaselineGate(concurrency=1, cache_entries=256, wait_s=30.0)
    replay_gate = BaselineGate(concurrency=2, cache_entries=0, wait_s=10.0)
    registry = harden_app(app, limits, metrics_prefix="inferencegym_env")
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
            raise _err(404, str(exc)) from None

    # -- the OpenEnv control endpoints, with sessions ------------------------------------
    @app.post("/reset", tags=["Environment Control"], summary="Start an episode (creates a session)")
    def reset(request: Request, body: ResetBody = Body(default_factory=ResetBody)) -> dict[str, Any]:
        task_id = body.task_id
        if task_id is not None and task_id not in single_task_ids():
            raise _err(422, f"unknown task {task_id!r}; valid: {', '.join(single_task_ids())}",
                       field="task_id")
        if body.session_id is not None:
            sess = _get(body.session_id)
            created = False
        else:
            try:
                sess = store.create(owner=request.client.host if request.client else "")
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
            raise _err(422, str(exc)) from None
        return _payload(obs, sess.session_id)

    @app.post("/step", tags=["Environment Control"], summary="Apply a serving configuration for one window")
    def step(body: StepBody) -> dict[str, Any]:
        sess = _get(body.session_id)
        try:
            with sess.lock:
                obs = sess.env.step(body.action)
        except InvalidActionError as exc:
            raise _err(422, str(exc), field="action") from None
        except (EpisodeOverError, NotResetError) as exc:
            raise _err(409, str(exc)) from None
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
            raise _err(404, str(exc)) from None
        return {"closed": session_id}

    # -- tasks, grader, baseline ------------------------------------------------------------
    @app.get("/tasks", tags=["Environment Info"], summary="Tasks and the action schema")
    def tasks() -> dict[str, Any]:
        return {"tasks": [_task_summary(t) for t in list_tasks(kind="single")],
                "default_task": DEFAULT_TASK_ID, "action_schema": _action_schema(),
                "policies": _baseline_policy_names()}

    @app.post("/grader", tags=["Grading"], summary="Grade a session's episode or a posted episode log")
    def grader(body: GraderBody) -> dict[str, Any]:
        if body.session_id is not None:
            if body.episode_log is not None or body.actions is not None:
                raise _err(422, "give either session_id or (task_id, seed, actions), not both")
            sess = _get(body.session_id)
            try:
                with sess.lock:
                    result = sess.env.grade()
                    st = sess.env.state
            except NotResetError as exc:
                raise _err(409, str(exc)) from None
            return _finite({"session_id": body.session_id, "task_id": st.task_id, "done": st.done,
                            "steps": st.step_count, "score": float(result),
                            "breakdown": result.model_dump(), "verified_by": "session"})
        if body.episode_log is not None:
            raise _err(422, "episode_log is not accepted: a client-written log could claim anything. "
                            "Send task_id, seed and actions (the server replays them and grades the "
                            "log it writes itself), or the session_id of a server-side episode",
                       field="episode_log")
        if body.task_id is None or body.seed is None or body.actions is None:
            raise _err(422, "give a session_id, or task_id, seed and actions")
        if body.task_id not in single_task_ids():
            raise _err(422, f"unknown task {body.task_id!r:.80}; valid: {', '.join(single_task_ids())}",
                       field="task_id")
        actions = [to_serve_action(a) for a in body.actions]
        try:
            with replay_gate.slot():
                res = replay_grade(body.task_id, body.seed, actions)
        except BusyError as exc:
            raise HTTPException(status_code=429, detail={"error": str(exc)},
                                headers={"Retry-After": "2"}) from None
        except ReplayError as exc:
            raise _err(422, str(exc)) from None
        return _finite({"task_id": body.task_id, "seed": body.seed, "done": res.done,
                        "steps": res.steps, "score": float(res.grade),
                        "breakdown": res.grade.model_dump(), "verified_by": "replay"})

    @app.get("/baseline", tags=["Grading"], summary="Deterministic baseline scores on every task")
    def baseline(policy: list[str] | None = Query(None, description=f"default: {', '.join(BASELINE_POLICIES)}"),
                 task_id: str | None = Query(None, max_length=128),
                 seed: int = Query(0, ge=0, le=2**32 - 1),
                 episodes: int = Query(1, ge=1, le=MAX_BASELINE_EPISODES)) -> dict[str, Any]:
        policies = list(dict.fromkeys(policy or BASELINE_POLICIES))
        valid = _baseline_policy_names()
        bad = [p for p in policies if p not in valid]
        if bad:
            raise _refuse_policy(bad[0])
        task_ids = single_task_ids()
        if task_id is not None:
            if task_id not in task_ids:
                raise _err(422, f"unknown task {task_id!r}; valid: {', '.join(task_ids)}", field="task_id")
            task_ids = [task_id]
        def compute(p: str, t: str) -> dict[str, Any]:
            seeds = [seed + i for i in range(episodes)]
            try:
                eps = [run_baseline_episode(p, t, s_) for s_ in seeds]
            except PolicyUnavailableError as exc:  # e.g. best_static not shipped yet
                return {"policy": p, "task_id": t, "seeds": seeds, "scores": None,
                        "score_mean": None, "error": str(exc)}
            scores = [e["score"] for e in eps]
            return {"policy": p, "task_id": t, "seeds": seeds, "scores": scores,
                    "score_mean": sum(scores) / len(scores)}

        try:
            rows = [baseline_gate.cached((p, t, seed, episodes), lambda p=p, t=t: compute(p, t))
                    for p in policies for t in task_ids]
        except BusyError as exc:
            raise HTTPException(status_code=429, detail={"error": str(exc)},
                                headers={"Retry-After": "5"}) from None
        return _finite({"results": rows})

    @app.post("/suggest", tags=["Grading"], summary="The action a baseline would take in this session now")
    def suggest(body: SuggestBody) -> dict[str, Any]:
        if body.policy not in _baseline_policy_names():
            raise _refuse_policy(body.policy)
        sess = _get(body.session_id)
        with sess.lock:
            env = sess.env
            if env.state.episode_id is None or env.last_obs is None:
                raise _err(409, "call /reset before asking for a suggestion")
            key = ("policy", body.policy, env.task_id, env.state.episode_id)
            pol = sess.data.get(key)
            if pol is None:  # one policy object per episode: stateful baselines keep their memory
                try:
                    pol = get_policy(body.policy, env.task_id)
                except ValueError as exc:
                    raise _err(422, f"policy {body.policy!r} is not available for task "
                                    f"{env.task_id!r}: {exc}", field="policy") from None
                if callable(getattr(pol, "reset", None)):
                    pol.reset(seed=env.state.seed)
                sess.data = {key: pol}
            action = pol.act(env.last_obs, env.last_info)

        return {"policy": body.policy, "action": to_serve_action(action).model_dump()}

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

    app.router.on_startup.append(_start_reaper)
    app.router.on_shutdown.append(_stop_reaper)

    @app.exception_handler(SessionLimitError)
    async def _limit_handler(request: Request, exc: SessionLimitError) -> JSONResponse:
        return JSONResponse(status_code=429, content={"detail": {"error": str(exc)}})

    return app


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
    uvicorn.run(build_app(max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout_s,
                          max_sessions_per_client=args.max_sessions_per_client),
                host=args.host, port=args.port, log_level="info")


def __getattr__(name: str) -> Any:
    # ``uvicorn inferencegym.apps.env_server.app:app`` (and openenv.yaml's ``app:``) without building the app
    # on every import of this module.
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(name)


if __name__ == "__main__":
    main()
