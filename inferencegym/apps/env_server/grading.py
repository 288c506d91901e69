"""The grading routes of the OpenEnv server: ``GET /tasks``, ``POST /grader``, ``GET /baseline`` and
``POST /suggest``.

Whole-episode replays (``/grader`` with actions, ``/baseline``) run in the episode pools the app
owns, never on the threads of the cheap routes; privileged policies are never served."""

from __future__ import annotations

from typing import Any, Callable

from fastapi import FastAPI, HTTPException, Query
from fastapi.concurrency import run_in_threadpool

from inferencegym.apps.env_server import episodes
from inferencegym.apps.env_server.bodies import GraderBody, SuggestBody
from inferencegym.apps.env_server.environment import (
    DEFAULT_TASK_ID,
    NotResetError,
    single_task_ids,
    to_serve_action,
)
from inferencegym.apps.env_server.limits import BusyError, EpisodePool, ResultCache
from inferencegym.apps.env_server.responses import busy, err, finite
from inferencegym.apps.env_server.sessions import Session
from inferencegym.envs import list_tasks
from inferencegym.envs.actions import ServeAction
from inferencegym.envs.verifier import ReplayError
from inferencegym.policies import get_policy, is_privileged, list_policies

BASELINE_POLICIES = ("static_default", "heuristic", "best_static")
"""Baselines shown by ``GET /baseline`` by default (deterministic policies only)."""
MAX_BASELINE_EPISODES = 5
"""Episodes per policy and task one ``GET /baseline`` may ask for."""


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


def _baseline_policy_names() -> list[str]:
    """Registry policies the server may run: not the LLM policy (it needs a key) and never a
    privileged one (``clairvoyant`` reads the hidden future; the registry marks it)."""
    return [p for p in list_policies(kind="single") if p != "llm" and not is_privileged(p)]


def _refuse_policy(name: str) -> HTTPException:
    if is_privileged(name):
        return err(403, f"policy {name!r} is privileged (it reads the hidden workload future) and "
                         f"is never served to an agent; available: {', '.join(_baseline_policy_names())}",
                    field="policy")
    return err(422, f"unknown policy {name!r:.80}; valid: {', '.join(_baseline_policy_names())}",
                field="policy")


def add_grading_routes(app: FastAPI, *, get_session: Callable[[str], Session],
                       replay_pool: EpisodePool, baseline_pool: EpisodePool,
                       baseline_cache: ResultCache) -> None:
    """Register the grading routes on ``app``.

    Args:
        get_session: the session of an id, or a 404 (the app's session store).
        replay_pool: runs ``/grader`` replays of posted actions.
        baseline_pool: runs ``/baseline`` episodes.
        baseline_cache: ``/baseline`` rows already computed, by (policy, task, seed, episodes).
    """
    @app.get("/tasks", tags=["Environment Info"], summary="Tasks and the action schema")
    def tasks() -> dict[str, Any]:
        return {"tasks": [_task_summary(t) for t in list_tasks(kind="single")],
                "default_task": DEFAULT_TASK_ID, "action_schema": _action_schema(),
                "policies": _baseline_policy_names()}

    @app.post("/grader", tags=["Grading"], summary="Grade a session's episode or a posted episode log")
    async def grader(body: GraderBody) -> dict[str, Any]:
        if body.session_id is not None:
            if body.episode_log is not None or body.actions is not None:
                raise err(422, "give either session_id or (task_id, seed, actions), not both")
            sess = get_session(body.session_id)

            def grade_session() -> tuple[Any, Any]:
                with sess.lock:
                    return sess.env.grade(), sess.env.state

            try:
                result, st = await run_in_threadpool(grade_session)
            except NotResetError as exc:
                raise err(409, str(exc)) from None
            return finite({"session_id": body.session_id, "task_id": st.task_id, "done": st.done,
                            "steps": st.step_count, "score": float(result),
                            "breakdown": result.model_dump(), "verified_by": "session"})
        if body.episode_log is not None:
            raise err(422, "episode_log is not accepted: a client-written log could claim anything. "
                            "Send task_id, seed and actions (the server replays them and grades the "
                            "log it writes itself), or the session_id of a server-side episode",
                       field="episode_log")
        if body.task_id is None or body.seed is None or body.actions is None:
            raise err(422, "give a session_id, or task_id, seed and actions")
        if body.task_id not in single_task_ids():
            raise err(422, f"unknown task {body.task_id!r:.80}; valid: {', '.join(single_task_ids())}",
                       field="task_id")
        actions = [to_serve_action(a).model_dump() for a in body.actions]
        try:
            res = await replay_pool.run(episodes.replay_summary, body.task_id, body.seed, actions)
        except BusyError as exc:
            raise await busy(exc) from None
        except ReplayError as exc:
            raise err(422, str(exc)) from None
        return finite({"task_id": body.task_id, "seed": body.seed, **res, "verified_by": "replay"})

    @app.get("/baseline", tags=["Grading"], summary="Deterministic baseline scores on every task")
    async def baseline(policy: list[str] | None = Query(None, description=f"default: {', '.join(BASELINE_POLICIES)}"),
                 task_id: str | None = Query(None, max_length=128),
                 seed: int = Query(0, ge=0, le=2**32 - 1),
                 episodes_n: int = Query(1, ge=1, le=MAX_BASELINE_EPISODES, alias="episodes")
                 ) -> dict[str, Any]:
        policies = list(dict.fromkeys(policy or BASELINE_POLICIES))
        valid = _baseline_policy_names()
        bad = [p for p in policies if p not in valid]
        if bad:
            raise _refuse_policy(bad[0])
        task_ids = single_task_ids()
        if task_id is not None:
            if task_id not in task_ids:
                raise err(422, f"unknown task {task_id!r}; valid: {', '.join(task_ids)}", field="task_id")
            task_ids = [task_id]
        keys = [(p, t, seed, episodes_n) for p in policies for t in task_ids]
        rows = [baseline_cache.get(k) for k in keys]
        missing = [k for k, r in zip(keys, rows) if r is None]
        if missing:
            try:
                computed = await baseline_pool.run(episodes.baseline_rows, missing)
            except BusyError as exc:
                raise await busy(exc) from None
            fresh = dict(zip(missing, computed))
            for k, row in fresh.items():
                baseline_cache.put(k, row)
            rows = [r if r is not None else fresh[k] for k, r in zip(keys, rows)]
        return finite({"results": rows})

    @app.post("/suggest", tags=["Grading"], summary="The action a baseline would take in this session now")
    def suggest(body: SuggestBody) -> dict[str, Any]:
        if body.policy not in _baseline_policy_names():
            raise _refuse_policy(body.policy)
        sess = get_session(body.session_id)
        with sess.lock:
            env = sess.env
            if env.state.episode_id is None or env.last_obs is None:
                raise err(409, "call /reset before asking for a suggestion")
            key = ("policy", body.policy, env.task_id, env.state.episode_id)
            pol = sess.data.get(key)
            if pol is None:  # one policy object per episode: stateful baselines keep their memory
                try:
                    pol = get_policy(body.policy, env.task_id)
                except ValueError as exc:
                    raise err(422, f"policy {body.policy!r} is not available for task "
                                    f"{env.task_id!r}: {exc}", field="policy") from None
                if callable(getattr(pol, "reset", None)):
                    pol.reset(seed=env.state.seed)
                sess.data = {key: pol}
            action = pol.act(env.last_obs, env.last_info)

        return {"policy": body.policy, "action": to_serve_action(action).model_dump()}
