"""Client of the policy endpoint: :class:`HTTPPolicy`, a policy that asks a served model for actions.

The policy registry returns it for ``http://...`` / ``https://...`` specs, so
``inferencegym evaluate --policy http://127.0.0.1:8000 --task bursty_workload`` runs the usual
evaluation with every action coming from the endpoint: the served policy is graded exactly like the
in-process one (same greedy actions, exact float32 round trip through JSON).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym.apps.policy_endpoint.policy import encode_json
from inferencegym.envs.actions import flat_to_action
from inferencegym.tasks.spec import get_task


class EndpointError(RuntimeError):
    """The endpoint answered with an error status or could not be reached."""


def _task_kind(task_id: str | None) -> str | None:
    if task_id is None:
        return None
    from inferencegym.tasks.control import CONTROL_TASKS

    if task_id in CONTROL_TASKS:  # a control-plane agent: the raw action (an int)
        return "control"
    return getattr(get_task(task_id), "kind", "single")


class HTTPPolicy:
    """A policy served by ``inferencegym serve`` (Ray Serve) at ``url``.

    Args:
        url: base URL of the endpoint, e.g. ``http://127.0.0.1:8000``.
        task_id: the task the caller evaluates on. If the endpoint declares a task (``GET
            /metadata``) and it differs, construction fails rather than scoring the wrong policy.
        timeout_s: per-request timeout.
    """

    def __init__(self, url: str, task_id: str | None = None, *, timeout_s: float = 30.0) -> None:
        import httpx

        if not url.startswith(("http://", "https://")):
            raise ValueError(f"policy URL must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.task_id = task_id
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s)
        self.metadata = self._get("/metadata")
        served_task = self.metadata.get("task_id")
        if task_id is not None and served_task is not None and served_task != task_id:
            self.close()
            raise ValueError(f"the endpoint {self.url} serves a policy for task {served_task!r}, "
                             f"not {task_id!r}; serve a policy for {task_id!r} or evaluate on "
                             f"{served_task!r}")
        self.policy_version = self.metadata.get("policy_version")
        self.kind = _task_kind(task_id)
        self.name = f"http:{self.url}"

    # -- HTTP --------------------------------------------------------------------------

    def _get(self, path: str) -> dict[str, Any]:
        import httpx

        try:
            r = self._http.get(path)
        except httpx.HTTPError as exc:
            raise EndpointError(f"cannot reach policy endpoint {self.url}{path}: {exc}; is "
                                f"`inferencegym serve` running?") from exc
        return self._check(r, path)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            r = self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise EndpointError(f"policy endpoint {self.url}{path} failed: {exc}") from exc
        return self._check(r, path)

    def _check(self, r: Any, path: str) -> dict[str, Any]:
        if r.status_code != 200:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise EndpointError(f"{self.url}{path} answered {r.status_code}: {detail}")
        return r.json()

    # -- policy API --------------------------------------------------------------------

    def _to_action(self, value: Any) -> Any:
        """The endpoint's raw action -> what the in-process policy returns for this task kind
        (``inferencegym.rl.policy_loader.ModulePolicy``): a ServeAction decoded from the flat
        MultiDiscrete index for single-agent tasks, a replica index for cluster tasks, the raw
        action (int or int64 array) when no task is known."""
        if self.kind == "single" and isinstance(value, list):
            return flat_to_action(np.asarray(value, dtype=np.int64))
        if isinstance(value, list):
            return np.asarray(value, dtype=np.int64)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    def act(self, obs: Any, info: Any = None) -> Any:
        """The served policy's action for one observation (numpy int64 array or int)."""
        return self._to_action(self._post("/act", {"observation": encode_json(obs)})["action"])

    def act_batch(self, observations: list[Any]) -> list[Any]:
        """Actions for several observations in one request."""
        out = self._post("/act", {"observations": [encode_json(o) for o in observations]})
        return [self._to_action(a) for a in out["actions"]]

    def act_flat(self, obs: Any) -> np.ndarray:
        """The raw module action (flat MultiDiscrete index for single-agent tasks)."""
        return np.asarray(self._post("/act", {"observation": encode_json(obs)})["action"], dtype=np.int64)

    def reset(self, *args: Any, **kwargs: Any) -> None:
        """Policies may be reset between episodes; the served policy is stateless."""

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"HTTPPolicy({self.url!r}, task_id={self.task_id!r}, version={self.policy_version!r})"
