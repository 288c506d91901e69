"""Knob physics of a running cluster: which knobs a replica may change, which execution model a
config runs on, and what a change costs (a weight reload on a quantization switch).

``Cluster.apply_replica_config`` orchestrates (validate every replica's new config, then hand each
one to its replica at the next iteration boundary); this module holds the rules it applies.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .config import ReplicaConfig
from .execution import ExecutionModel
from .names import check_replica_names

REPLICA_KNOBS = ("batch_cap", "kv_budget_fraction", "chunk_size", "speculation_depth", "quantization",
                 "scheduler", "spec_acceptance", "max_tokens_per_iter", "watermark_fraction")
"""The ``ReplicaConfig`` fields a running replica may change (``Cluster.apply_replica_config``)."""


def hardware(cfg: ReplicaConfig) -> tuple:
    """Hardware identity of a replica config (model, GPU, tensor and expert parallel, engine
    profile, KV-cache element type, pipeline stages)."""
    return (cfg.model, cfg.gpu, cfg.tensor_parallel, cfg.engine_profile, cfg.expert_parallel,
            cfg.kv_cache_dtype, cfg.draft_model, cfg.pipeline_parallel)


class ModelBank:
    """Execution models by (hardware, quantization), built once each: the base replica's hardware
    derives its tiers from the base model (``with_quantization``); other hardware (heterogeneous
    clusters) is built from the presets."""

    def __init__(self, base_cfg: ReplicaConfig, base_model: Any, gpu_hour_usd: float | None) -> None:
        self.base_cfg = base_cfg
        self.base_model = base_model
        self.gpu_hour_usd = gpu_hour_usd
        self._by_quant: dict[str, Any] = {base_cfg.quantization: base_model}
        self._by_hw: dict[tuple, Any] = {}

    def model_for(self, cfg: ReplicaConfig) -> Any:
        """The execution model a replica with ``cfg`` runs on."""
        if hardware(cfg) != hardware(self.base_cfg):
            key = (hardware(cfg), cfg.quantization)
            m = self._by_hw.get(key)
            if m is None:
                m = self._by_hw[key] = ExecutionModel.shared_preset(
                    model=cfg.model, gpu=cfg.gpu, tensor_parallel=cfg.tensor_parallel,
                    quantization=cfg.quantization, gpu_hour_usd=self.gpu_hour_usd,
                    engine_profile=cfg.engine_profile, expert_parallel=cfg.expert_parallel,
                    kv_cache_dtype=cfg.kv_cache_dtype, draft_model=cfg.draft_model,
                    pipeline_parallel=cfg.pipeline_parallel)
            return m
        m = self._by_quant.get(cfg.quantization)
        if m is None:
            m = self._by_quant[cfg.quantization] = self.base_model.with_quantization(cfg.quantization)
        return m


def changed_configs(current: list[tuple[int, ReplicaConfig]], knobs: dict[str, Any]
                    ) -> list[tuple[int, ReplicaConfig, ReplicaConfig]]:
    """``(replica, current config, new config)`` for every replica whose config changes; every new
    config is validated (values and names) before anything changes (ValueError otherwise)."""
    bad = [k for k in knobs if k not in REPLICA_KNOBS]
    if bad:
        raise ValueError(f"unknown replica knob(s) {bad}; valid: {', '.join(REPLICA_KNOBS)}")
    out = []
    items = knobs.items()
    for i, cur in current:
        # every knob already in force, with the same type: the replaced config would equal ``cur``
        # (and pass the checks ``cur`` passed), so it is no change; skip building it (env steps
        # send the whole knob set every window)
        if all(type(v) is type(cv) and v == cv for k, v in items for cv in (getattr(cur, k),)):
            continue
        if type(cur) is not ReplicaConfig:
            new = dataclasses.replace(cur, **knobs)
            check_replica_names(new)
            out.append((i, cur, new if new != cur else None))
            continue
        new = _replaced(cur, knobs)
        check_replica_names(new)
        # ``new != cur`` (the dataclass ``__eq__``: field by field, identity or ``==``), asked of
        # the knob fields only: every other field of ``new`` is ``cur``'s own object
        same = all(v is cv or v == cv for k, v in items for cv in (getattr(cur, k),))
        out.append((i, cur, None if same else new))
    return [(i, cur, new) for i, cur, new in out if new is not None]


def _replaced(cur: ReplicaConfig, knobs: dict[str, Any]) -> ReplicaConfig:
    """``dataclasses.replace(cur, **knobs)`` for a ``ReplicaConfig`` (every field an ``__init__``
    field, no ``InitVar``; ``knobs`` checked to be fields): ``cur``'s field values with ``knobs``
    over them and the same ``__post_init__`` checks, without the generic per-field rebuild
    through ``__init__`` (a random policy changes every replica's config every env step)."""
    new = object.__new__(ReplicaConfig)
    d = new.__dict__
    d.update(cur.__dict__)
    d.update(knobs)
    new.__post_init__()
    return new


def reload_time_s(cur: ReplicaConfig, new: ReplicaConfig, model: Any) -> float:
    """Weight reload pause of a quantization switch: the new weights over the host-to-GPU link."""
    if new.quantization == cur.quantization:
        return 0.0
    return float(model.weight_bytes_per_gpu) / (new.host_to_gpu_gb_s * 1e9)
