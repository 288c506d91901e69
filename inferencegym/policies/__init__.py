"""Policy registry: ``get_policy(spec, task_id)`` and ``list_policies()``.

A policy is an object with ``act(obs, info=None) -> action`` (a :class:`ServeAction` for the
single-agent env) and an optional ``reset(seed=None)`` called at the start of every episode.

Spec schemes:

- a bare name (``random``, ``static_default``, ``heuristic``, ``best_static``, ``clairvoyant``, ...)
  -> this registry;
- a scheme (``checkpoint:PATH``, ``pretrained:TASK``, ``http://...``) -> the handler registered for
  it with :func:`register_scheme` by a higher layer: ``inferencegym.rl`` registers ``checkpoint:`` and
  ``pretrained:`` (RLlib checkpoints), ``inferencegym.apps.policy_endpoint`` registers ``http://`` and
  ``https://`` (a served policy). This package imports neither (layers: policies < rl < apps); a
  scheme whose layer has not been imported yet says which module to import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from inferencegym.policies.routers import (
    CLUSTER_ALIASES,
    PRIVILEGED_ROUTERS,
    ROUTER_POLICIES,
    get_cluster_policy,
)
from inferencegym.tasks import get_task


class Policy(Protocol):
    def act(self, obs: Any, info: dict | None = None) -> Any: ...


@dataclass(frozen=True)
class PolicyEntry:
    """One registered policy."""

    name: str
    factory: Callable[[str], Any]
    """``factory(task_id) -> policy``."""
    description: str
    kinds: tuple[str, ...] = ("single",)
    """Task kinds the policy supports (``single`` / ``cluster``)."""
    privileged: bool = False
    """Reads what no agent may see (the env's ``oracle/*`` info, true output lengths): a reference
    for evaluation only, never served to an agent (the HTTP server refuses it on every route)."""


_REGISTRY: dict[str, PolicyEntry] = {}
SCHEMES: tuple[str, ...] = ("checkpoint:", "pretrained:", "http://", "https://")
"""Spec prefixes resolved by handlers registered from higher layers."""
_SCHEME_PROVIDERS: dict[str, str] = {"checkpoint:": "inferencegym.rl", "pretrained:": "inferencegym.rl",
                                     "http://": "inferencegym.apps.policy_endpoint",
                                     "https://": "inferencegym.apps.policy_endpoint"}
_SCHEME_HANDLERS: dict[str, Callable[[str, str], Any]] = {}


def register_scheme(prefix: str, handler: Callable[[str, str], Any]) -> None:
    """Resolve specs starting with ``prefix`` by ``handler(spec, task_id)`` (called by upper layers)."""
    if prefix not in SCHEMES:
        raise ValueError(f"unknown policy scheme {prefix!r}; valid: {', '.join(SCHEMES)}")
    _SCHEME_HANDLERS[prefix] = handler


def register_policy(name: str, factory: Callable[[str], Any], description: str = "",
                    kinds: tuple[str, ...] = ("single",), *, replace: bool = False,
                    privileged: bool = False) -> None:
    """Add a policy factory ``factory(task_id)`` under ``name`` (``privileged``: see
    :attr:`PolicyEntry.privileged`)."""
    if ":" in name or "/" in name:
        raise ValueError(f"policy names may not contain ':' or '/', got {name!r}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"policy {name!r} is already registered; pass replace=True to override")
    _REGISTRY[name] = PolicyEntry(name, factory, description, tuple(kinds), bool(privileged))


def is_privileged(spec: Any) -> bool:
    """Whether a policy (a registry name or a built policy object) needs privileged information.

    Registry entries say so in their metadata (:attr:`PolicyEntry.privileged`); the cluster router
    baselines in ``policies/routers.py`` (``PRIVILEGED_ROUTERS``); a policy object by its
    ``privileged`` attribute. Unknown names are not privileged (they are refused elsewhere)."""
    if not isinstance(spec, str):
        return bool(getattr(spec, "privileged", False))
    _ensure_builtins()
    entry = _REGISTRY.get(spec)
    if entry is not None and entry.privileged:
        return True
    return spec.split("+", 1)[0] in PRIVILEGED_ROUTERS


def list_policies(kind: str | None = None) -> list[str]:
    """Registered policy names (optionally only those supporting a task kind)."""
    _ensure_builtins()
    names = [n for n, e in _REGISTRY.items() if kind is None or kind in e.kinds]
    if kind == "cluster":  # the cluster env's router baselines (policies/routers.py)
        names += [n for n in (*ROUTER_POLICIES, *CLUSTER_ALIASES) if n not in names]
    return names


def describe_policies() -> dict[str, str]:
    _ensure_builtins()
    return {n: e.description for n, e in _REGISTRY.items()}


def get_policy(spec: str, task_id: str) -> Any:
    """Build the policy ``spec`` for ``task_id`` (see the module docstring for the schemes)."""
    _ensure_builtins()
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"policy spec must be a non-empty string, got {spec!r}")
    for prefix in SCHEMES:
        if spec.startswith(prefix):
            handler = _SCHEME_HANDLERS.get(prefix)
            if handler is None:
                raise ValueError(f"policy spec {spec!r} needs the {prefix!r} handler, which "
                                 f"{_SCHEME_PROVIDERS[prefix]} registers: import that module first "
                                 f"(the CLI does)")
            return handler(spec, task_id)
    if get_task(task_id).kind == "cluster":  # router (+ replica) baselines: policies/routers.py
        return get_cluster_policy(spec)
    entry = _REGISTRY.get(spec)
    if entry is None:
        scheme = spec.split(":", 1)[0] + ":" if ":" in spec else None
        what = f"unknown policy scheme {scheme!r}" if scheme else f"unknown policy {spec!r}"
        raise ValueError(f"{what}; valid: {', '.join(_REGISTRY)}, or checkpoint:PATH, "
                         f"pretrained:TASK, http(s)://URL")
    kind = get_task(task_id).kind
    if kind not in entry.kinds:
        raise ValueError(f"policy {spec!r} does not support {kind!r} tasks like {task_id!r}; "
                         f"policies for {kind!r} tasks: {', '.join(list_policies(kind))}")
    return entry.factory(task_id)


def _ensure_builtins() -> None:
    """Kept for callers: the built-in policies register when this package is imported."""


# The built-in policies register themselves here (bottom of the module: they import register_policy).
from inferencegym.policies import baselines as _baselines  # noqa: E402,F401
from inferencegym.policies import phase_rule as _phase_rule  # noqa: E402,F401

__all__ = ["Policy", "PolicyEntry", "get_policy", "list_policies", "register_policy",
           "register_scheme", "is_privileged", "describe_policies", "SCHEMES"]
