"""The prefix-sharing part of a task's workload: which session generator, with which overrides."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

PREFIX_PRESETS: tuple[str, ...] = ("mooncake_shared_prefix", "mooncake_multiturn", "mooncake_agent")
"""Prefix-sharing generator presets of :mod:`inferencegym.workload` (fitted to the Mooncake trace)."""


def _check_lognormal(name: str, v: tuple[float, float] | None) -> None:
    if v is None:
        return
    ok = isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v)
    if not ok or not (v[0] > 0 and v[1] >= 0 and math.isfinite(v[0]) and math.isfinite(v[1])):
        raise ValueError(f"PrefixSharingSpec.{name} must be None or (median > 0, sigma >= 0) of a "
                         f"lognormal, got {v!r}")


@dataclass(frozen=True, kw_only=True)
class PrefixSharingSpec:
    """Prefix-sharing sessions of a task (``WorkloadSpec.process="prefix"``), drawn per episode by
    :func:`inferencegym.workload.generate_prefix_workload` from a shipped preset with the overrides
    below (``None`` keeps the preset's figure). Lengths given here are lognormals ``(median,
    sigma)``, turned into the generator's quantile tables; every request carries the hash chain of
    its prompt (shared prefixes, previous turns), so the simulator's prefix caches see the sharing."""

    preset: str = "mooncake_shared_prefix"
    """Generator preset (:data:`PREFIX_PRESETS`): shared system prompts, conversations, agent loops."""
    num_prefixes: int | None = None
    """Shared prefixes in the pool (tenants' system prompts, documents)."""
    zipf_s: float | None = None
    """Zipf exponent of the prefixes' popularity (P(rank r) ~ r^-zipf_s)."""
    unique_share: float | None = None
    """Share of sessions with no shared prefix (0..1)."""
    prefix_tokens: tuple[float, float] | None = None
    """Shared prefix length in tokens, lognormal (median, sigma); one draw per prefix per episode."""
    message_tokens: tuple[float, float] | None = None
    """Length of the message after the prefix and of every later turn's new message, (median, sigma)."""
    unique_prompt_tokens: tuple[float, float] | None = None
    """First prompt of a session without a shared prefix, (median, sigma)."""
    output_tokens: tuple[float, float] | None = None
    """Output length in tokens, (median, sigma); clipped at ``WorkloadSpec.max_output_tokens``."""
    turns: tuple[float, float] | None = None
    """Turns per session, (median, sigma) (rounded, >= 1)."""
    think_time_s: tuple[float, float] | None = None
    """Time between a session's turns in seconds, (median, sigma)."""
    context_includes_output: bool | None = None
    """Turn i's prompt contains turn i-1's output (conversations)."""

    def __post_init__(self) -> None:
        if self.preset not in PREFIX_PRESETS:
            raise ValueError(f"PrefixSharingSpec.preset must be one of {', '.join(PREFIX_PRESETS)}, "
                             f"got {self.preset!r}")
        if self.num_prefixes is not None and self.num_prefixes < 0:
            raise ValueError(f"PrefixSharingSpec.num_prefixes must be >= 0, got {self.num_prefixes}")
        if self.zipf_s is not None and not self.zipf_s >= 0:
            raise ValueError(f"PrefixSharingSpec.zipf_s must be >= 0, got {self.zipf_s}")
        if self.unique_share is not None and not 0.0 <= self.unique_share <= 1.0:
            raise ValueError(f"PrefixSharingSpec.unique_share must be in [0, 1], got {self.unique_share}")
        for name in ("prefix_tokens", "message_tokens", "unique_prompt_tokens", "output_tokens", "turns",
                     "think_time_s"):
            _check_lognormal(name, getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
