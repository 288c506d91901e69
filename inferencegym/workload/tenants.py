"""Multi-tenant mixing: several tenants, each with its own arrival process, length sampler,
priority and SLO, merged into one `Workload` whose ``tenant`` column indexes the tenant list.

    mix = TenantMix(tenants=(
        Tenant(name="chat", fit="azure_conv", priority=1, slo_ttft_s=1.0),
        Tenant(name="batch", fit="azure_code", rate_scale=0.5, slo_ttft_s=10.0),
    ))
    w = mix.generate(3600, rng)        # w.tenant in {0, 1}; w.priority from each tenant
    mix.slos()                         # per-tenant SLO figures for the cluster config

A tenant either names a fit (a `WorkloadFit`, its dict, a JSON path or a default name) or gives
``arrival`` and ``lengths`` dicts directly. Each tenant draws from its own child Generator
(``rng.spawn``), so adding a tenant never changes the traffic of the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferencegym.workload.fit import generate

from .fit import DEFAULT_FITS, WorkloadFit, default_fit
from .trace import Workload

__all__ = ["Tenant", "TenantMix"]


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """One tenant of a mix."""

    name: str
    """Label (for reports)."""
    fit: str | dict | None = None
    """Default fit name, fit JSON path or fit dict; or None to use `arrival` + `lengths`."""
    arrival: dict | None = None
    """Arrival process dict (when `fit` is None)."""
    lengths: dict | None = None
    """Length sampler dict (when `fit` is None)."""
    rate_scale: float = 1.0
    """Multiplies the tenant's request rate."""
    priority: int = 0
    """0 best effort, 1 priority."""
    slo_ttft_s: float = 2.0
    """Time-to-first-token objective (s)."""
    slo_tpot_s: float = 0.2
    """Time-per-output-token objective (s)."""

    def __post_init__(self):
        if (self.fit is None) == (self.arrival is None or self.lengths is None):
            if self.fit is None:
                raise ValueError(f"tenant '{self.name}': give either fit or both arrival and lengths")
        if not self.rate_scale > 0:
            raise ValueError(f"tenant '{self.name}': rate_scale must be > 0, got {self.rate_scale}")
        if self.priority not in (0, 1):
            raise ValueError(f"tenant '{self.name}': priority must be 0 or 1, got {self.priority}")

    def resolve_fit(self) -> WorkloadFit:
        if self.fit is None:
            f = WorkloadFit(arrival=self.arrival, lengths=self.lengths, source=self.name)
        elif isinstance(self.fit, dict):
            f = WorkloadFit.from_dict(self.fit)
        elif self.fit in DEFAULT_FITS:
            f = default_fit(self.fit)
        else:
            f = WorkloadFit.load(self.fit)
        if self.rate_scale != 1.0:
            f = f.with_rate(f.arrival["rate_per_s"] * self.rate_scale)
        return f


@dataclass(frozen=True, kw_only=True)
class TenantMix:
    """A set of tenants generated together."""

    tenants: tuple[Tenant, ...]
    """The tenants; their position is the ``tenant`` index."""

    def __post_init__(self):
        if not self.tenants:
            raise ValueError("TenantMix: need at least one tenant")

    def generate(self, duration_s: float, rng: np.random.Generator) -> Workload:
        children = rng.spawn(len(self.tenants))
        parts = [generate(t.resolve_fit(), duration_s, child, tenant=i, priority=t.priority,
                          source=t.name) for i, (t, child) in enumerate(zip(self.tenants, children))]
        return Workload.merge(parts, source="mix(" + ",".join(t.name for t in self.tenants) + ")")

    def slos(self) -> list[dict]:
        return [{"tenant": i, "name": t.name, "priority": t.priority, "slo_ttft_s": t.slo_ttft_s,
                 "slo_tpot_s": t.slo_tpot_s} for i, t in enumerate(self.tenants)]

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return {"tenants": [asdict(t) for t in self.tenants]}

    @classmethod
    def from_dict(cls, d: dict) -> "TenantMix":
        """From ``{"tenants": [{"name": ..., "fit": ..., ...}, ...]}`` (the `to_dict` form)."""
        items = d.get("tenants") if isinstance(d, dict) else None
        if not isinstance(items, list) or not items:
            raise ValueError("tenant mix: expected {'tenants': [{'name': ..., 'fit': ...}, ...]}")
        tenants = []
        for i, t in enumerate(items):
            if not isinstance(t, dict):
                raise ValueError(f"tenant mix: tenant {i} must be a mapping, got {type(t).__name__}")
            try:
                tenants.append(Tenant(**t))
            except TypeError as exc:
                raise ValueError(f"tenant mix: tenant {i}: {exc}") from None
        return cls(tenants=tuple(tenants))

    @classmethod
    def load(cls, path) -> "TenantMix":
        """From a YAML or JSON file."""
        from pathlib import Path

        from inferencegym.safe_yaml import read_yaml

        path = Path(path)
        d = read_yaml(path, "tenant mix")  # YAML or JSON; one-line YamlInputError (a ValueError)
        try:
            return cls.from_dict(d)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
