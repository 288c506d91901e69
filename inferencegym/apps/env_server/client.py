"""Python clients of the InferenceGym OpenEnv server.

* :class:`InferenceGymClient`: synchronous, over the server's HTTP session routes (``/reset`` returns
  a ``session_id`` that ``/step``, ``/state`` and ``/grader`` then use). This is the one to script
  with, and the only one that can call ``/grader``, ``/tasks`` and ``/baseline``::

      from inferencegym.apps.env_server.client import InferenceGymClient
      with InferenceGymClient("http://127.0.0.1:7860") as env:
          r = env.reset(task_id="bursty_workload", seed=3)
          while not r.done:
              r = env.step({"batch_cap": 64, "kv_budget_fraction": 0.85})
          print(env.grade()["score"])

* :class:`InferenceGymEnv`: OpenEnv's own ``EnvClient`` (WebSocket ``/ws`` session; async, or sync
  when called outside an event loop) for OpenEnv-native trainers (TRL, etc.). Its episode lives in
  the WebSocket session, so the grade comes with the last observation (``observation.grade``).

Both return OpenEnv ``StepResult[InferenceGymObservation]``.
"""

from __future__ import annotations

from typing import Any

import httpx
from openenv.core import EnvClient
from openenv.core.client_types import StepResult

from inferencegym.apps.env_server.environment import (
    InferenceGymAction,
    InferenceGymObservation,
    InferenceGymState,
)


class InferenceGymHTTPError(RuntimeError):
    """The server refused a request; ``status`` and ``detail`` are the server's answer."""

    def __init__(self, status: int, detail: Any, what: str) -> None:
        self.status = status
        self.detail = detail
        msg = detail.get("error") if isinstance(detail, dict) and "error" in detail else detail
        super().__init__(f"{what} failed with HTTP {status}: {msg}")


def _action_dict(action: Any) -> dict[str, Any]:
    if hasattr(action, "model_dump"):
        d = action.model_dump()
        d.pop("metadata", None)
        return d
    if isinstance(action, dict):
        return dict(action)
    raise TypeError(f"action must be a ServeAction, an InferenceGymAction or a dict, got "
                    f"{type(action).__name__}")


def _step_result(payload: dict[str, Any]) -> StepResult[InferenceGymObservation]:
    obs_data = dict(payload.get("observation") or {})
    obs = InferenceGymObservation(**obs_data, reward=payload.get("reward"),
                                  done=bool(payload.get("done", False)))
    return StepResult(observation=obs, reward=payload.get("reward"), done=bool(payload.get("done")))


class InferenceGymClient:
    """Synchronous HTTP client with a server-side session (see the module docstring).

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:7860``.
        timeout_s: per-request timeout.
        transport: an ``httpx`` transport (e.g. ``httpx.ASGITransport(app)`` to talk to an app in
            process without a socket).
    """

    def __init__(self, base_url: str = "http://127.0.0.1:7860", *, timeout_s: float = 120.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)
        self.session_id: str | None = None

    # ------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, what: str, **kw: Any) -> Any:
        resp = self._http.request(method, path, **kw)
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail", resp.text)
            except ValueError:
                detail = resp.text
            raise InferenceGymHTTPError(resp.status_code, detail, what)
        return resp.json()

    def _need_session(self) -> str:
        if self.session_id is None:
            raise RuntimeError("no session yet: call reset() first")
        return self.session_id

    # ------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, task_id: str | None = None,
              episode_id: str | None = None) -> StepResult[InferenceGymObservation]:
        """Start an episode (in this client's session once it has one)."""
        body: dict[str, Any] = {}
        if seed is not None:
            body["seed"] = seed
        if task_id is not None:
            body["task_id"] = task_id
        if episode_id is not None:
            body["episode_id"] = episode_id
        if self.session_id is not None:
            body["session_id"] = self.session_id
        try:
            payload = self._call("POST", "/reset", "reset", json=body)
        except InferenceGymHTTPError as exc:
            if exc.status != 404 or "session_id" not in body:
                raise
            body.pop("session_id")  # our session expired: start a new one
            payload = self._call("POST", "/reset", "reset", json=body)
        self.session_id = payload["session_id"]
        return _step_result(payload)

    def step(self, action: Any) -> StepResult[InferenceGymObservation]:
        """Apply ``action`` (ServeAction, InferenceGymAction or dict) for one control window."""
        payload = self._call("POST", "/step", "step",
                             json={"session_id": self._need_session(), "action": _action_dict(action)})
        return _step_result(payload)

    def state(self) -> InferenceGymState:
        return InferenceGymState(**self._call("GET", "/state", "state",
                                              params={"session_id": self._need_session()}))

    def grade(self) -> dict[str, Any]:
        """The grader's score and breakdown of this session's episode (so far)."""
        return self._call("POST", "/grader", "grade", json={"session_id": self._need_session()})

    def grade_actions(self, task_id: str, seed: int, actions: list[Any]) -> dict[str, Any]:
        """Grade an episode played elsewhere: the server replays ``actions`` (``ServeAction``s or
        dicts, one per window) from ``seed`` and grades the log it writes itself."""
        acts = [a.model_dump() if hasattr(a, "model_dump") else a for a in actions]
        return self._call("POST", "/grader", "grade",
                          json={"task_id": task_id, "seed": seed, "actions": acts})

    def tasks(self) -> dict[str, Any]:
        return self._call("GET", "/tasks", "tasks")

    def baseline(self, **params: Any) -> dict[str, Any]:
        return self._call("GET", "/baseline", "baseline", params=params)

    def suggest(self, policy: str = "heuristic") -> dict[str, Any]:
        """The action baseline ``policy`` would take now in this session."""
        return self._call("POST", "/suggest", "suggest",
                          json={"session_id": self._need_session(), "policy": policy})["action"]

    def close(self) -> None:
        """Close the server-side session and the connection pool."""
        if self.session_id is not None:
            try:
                self._http.delete(f"/sessions/{self.session_id}")
            except httpx.HTTPError:
                pass
            self.session_id = None
        self._http.close()

    def __enter__(self) -> "InferenceGymClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class InferenceGymEnv(EnvClient[InferenceGymAction, InferenceGymObservation, InferenceGymState]):
    """OpenEnv ``EnvClient`` (WebSocket session) for InferenceGym::

        with InferenceGymEnv(base_url="http://127.0.0.1:7860") as env:   # sync outside asyncio
            r = env.reset(seed=1, task_id="static_workload")
            r = env.step(InferenceGymAction(batch_cap=64))
    """

    def _step_payload(self, action: Any) -> dict[str, Any]:
        return _action_dict(action)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[InferenceGymObservation]:
        return _step_result(payload)

    def _parse_state(self, payload: dict[str, Any]) -> InferenceGymState:
        return InferenceGymState(**payload)


__all__ = ["InferenceGymClient", "InferenceGymEnv", "InferenceGymHTTPError"]
