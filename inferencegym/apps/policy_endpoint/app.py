"""The Ray Serve policy endpoint.

Routes (FastAPI ingress, so bodies are validated by pydantic and a malformed body gets a 422 whose
``detail`` says what was wrong):

- ``POST /act``: ``{"observation": OBS}`` -> ``{"action": A, "policy_version": V}``, or
  ``{"observations": [OBS, ...]}`` -> ``{"actions": [A, ...], "policy_version": V}``.
- ``GET /healthz``: ``{"status": "ok", "policy_version": V}``.
- ``GET /metadata``: task, policy spec, module id, checkpoint path, version, observation and action
  spaces, batching limits.

Observations from concurrent requests are gathered by ``@serve.batch`` (up to ``max_batch_size``
requests, waiting at most ``batch_wait_timeout_s``) and answered by one forward pass.

Start it with :func:`run_server` (used by ``inferencegym serve``), or ``serve run serve/config.yaml``
which calls :func:`build_app` with the config's ``args``. The proxy binds 127.0.0.1 unless a host is
given explicitly.
"""

# No `from __future__ import annotations` here: FastAPI must see the real body types of the
# ingress methods (as strings they do not resolve through serve.ingress and the body turns into a
# query parameter).
import os
from typing import Any

from fastapi import FastAPI, HTTPException
from ray import serve

from inferencegym.apps.http_security import HTTPLimits, harden_app, metrics_response
from inferencegym.apps.policy_endpoint.policy import ObservationError, ServedPolicy
from inferencegym.apps.policy_endpoint.schemas import ActRequest, ActResponse, Health, Metadata

APP_NAME = "inferencegym-policy"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.002

DEFAULT_MAX_BODY_BYTES = 4_000_000
"""Largest ``/act`` body (1024 observations of a few hundred numbers fit; more is 413)."""

api = FastAPI(title="InferenceGym policy endpoint",
              description="Greedy actions of a trained InferenceGym policy (Ray Serve).")
# Body limit, Host check, API key (INFERENCEGYM_API_KEY), JSON-safe 422s, Prometheus metrics: the
# same protections as the environment server (docs/threat_model.md). Read when a replica imports
# this module, so the environment variables must be set where Ray starts (or in the runtime_env).
_REGISTRY = harden_app(api, HTTPLimits(max_body_bytes=int(os.environ.get(
    "INFERENCEGYM_SERVE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))), metrics_prefix="inferencegym_serve")


def bind_replica_grpc_to_node_ip() -> bool:
    """Make this Serve replica's inter-deployment gRPC server listen on the node's address only.

    Ray Serve 2.60 starts that server on ``[::]:0`` (every interface) in ``Replica._on_initialized``,
    after the deployment's constructor ran; nothing configures it. The server is reached at the
    node's IP (127.0.0.1 on a loopback-only Ray, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), so this
    rebinds it there. Called in the replica, from :class:`PolicyDeployment`'s constructor; returns
    False (and changes nothing) when Ray's internals moved."""
    try:
        import ray
        from ray.serve._private import replica as replica_mod
    except ImportError:
        return False
    original = getattr(replica_mod, "add_port_to_grpc_server", None)
    if original is None:
        return False
    if getattr(original, "_inferencegym_node_ip", False):
        return True
    node_ip = ray.util.get_node_ip_address()
    host = f"[{node_ip}]" if ":" in node_ip else node_ip

    def add_port_on_node_ip(server: Any, address: str) -> int:
        if address.startswith(("[::]:", "0.0.0.0:")):
            address = f"{host}:{address.rsplit(':', 1)[1]}"
        return original(server, address)

    add_port_on_node_ip._inferencegym_node_ip = True  # type: ignore[attr-defined]
    replica_mod.add_port_to_grpc_server = add_port_on_node_ip
    return True


@serve.deployment(name="PolicyDeployment", ray_actor_options={"num_cpus": 0.5},
                  max_ongoing_requests=256)
@serve.ingress(api)
class PolicyDeployment:
    """Loads the policy once; answers ``/act`` in batches."""

    def __init__(self, policy: str, task_id: str | None = None, module_id: str | None = None,
                 max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                 batch_wait_timeout_s: float = DEFAULT_BATCH_WAIT_TIMEOUT_S) -> None:
        import torch

        torch.set_num_threads(1)  # 2-core machines: more threads only contend (see docs/serving.md)
        bind_replica_grpc_to_node_ip()  # Serve would listen on every interface (issue 25)

        self.policy = ServedPolicy.from_spec(policy, task_id=task_id, module_id=module_id)
        self.max_batch_size = int(max_batch_size)
        self._act_batched.set_max_batch_size(self.max_batch_size)
        self._act_batched.set_batch_wait_timeout_s(float(batch_wait_timeout_s))

    @serve.batch(max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S)
    async def _act_batched(self, requests: list[list[Any]]) -> list[list[Any]]:
        flat = [obs for req in requests for obs in req]
        actions = self.policy.act_batch(flat)
        out, i = [], 0
        for req in requests:
            out.append(actions[i:i + len(req)])
            i += len(req)
        return out

    @api.post("/act", response_model=ActResponse, response_model_exclude_none=True)
    async def act(self, body: ActRequest) -> ActResponse:
        try:
            observations = self.policy.decode(body.items(), batched=body.batched)
        except ObservationError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        actions = await self._act_batched(observations)
        if body.batched:
            return ActResponse(actions=actions, policy_version=self.policy.version)
        return ActResponse(action=actions[0], policy_version=self.policy.version)

    @api.get("/healthz", response_model=Health)
    async def healthz(self) -> Health:
        return Health(status="ok", policy_version=self.policy.version)

    @api.get("/metrics")
    async def metrics(self):
        return metrics_response(_REGISTRY)

    @api.get("/metadata", response_model=Metadata)
    async def metadata(self) -> Metadata:
        return Metadata(**self.policy.metadata(), max_batch_size=self.max_batch_size)


def build_app(args: dict[str, Any]) -> serve.Application:
    """Application builder for ``serve run`` (``import_path: inferencegym.apps.policy_endpoint.app:build_app``).

    ``args``: ``policy`` (``checkpoint:PATH`` | ``pretrained:TASK``; default from the
    ``INFERENCEGYM_POLICY`` environment variable), optional ``task_id``, ``module_id``,
    ``max_batch_size``, ``batch_wait_timeout_s``, ``num_replicas``, ``num_cpus`` (per replica)."""
    args = dict(args or {})
    policy = args.pop("policy", None) or os.environ.get("INFERENCEGYM_POLICY")
    if not policy:
        raise ValueError("no policy to serve: set args.policy in the Serve config (checkpoint:PATH or "
                         "pretrained:TASK) or the INFERENCEGYM_POLICY environment variable")
    num_replicas = int(args.pop("num_replicas", 1))
    num_cpus = float(args.pop("num_cpus", 0.5))
    known = {"task_id", "module_id", "max_batch_size", "batch_wait_timeout_s"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"unknown serve args {unknown}; valid: policy, num_replicas, num_cpus, "
                         f"{', '.join(sorted(known))}")
    deployment = PolicyDeployment.options(num_replicas=num_replicas,
                                          ray_actor_options={"num_cpus": num_cpus})
    return deployment.bind(policy, **args)


def run_server(policy: str, *, task_id: str | None = None, module_id: str | None = None,
               host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
               max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
               batch_wait_timeout_s: float = DEFAULT_BATCH_WAIT_TIMEOUT_S,
               num_replicas: int = 1, num_cpus: float = 0.5, blocking: bool = False) -> None:
    """Start Ray (if needed), Serve's proxy on ``host:port`` and the policy application.

    With ``blocking=False`` it returns once the application is RUNNING (stop it with
    :func:`shutdown_server`)."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray's own ports on loopback
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    # Per-request access logs cost CPU on every request (formatting + file writes); errors still log.
    quiet = {"enable_access_log": False, "log_level": "WARNING"}
    serve.start(http_options={"host": host, "port": int(port)}, logging_config=quiet)
    app = build_app({"policy": policy, "task_id": task_id, "module_id": module_id,
                     "max_batch_size": max_batch_size, "batch_wait_timeout_s": batch_wait_timeout_s,
                     "num_replicas": num_replicas, "num_cpus": num_cpus})
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=blocking, logging_config=quiet)


def shutdown_server() -> None:
    """Delete the application and stop Serve (Ray itself is left running)."""
    serve.shutdown()
