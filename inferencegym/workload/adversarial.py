"""Perturbations of a workload: Gaussian arrival jitter and mega-prompt injection.

Jitter: each arrival moves by an independent N(0, sigma^2) offset, times below 0 are reflected
to their absolute value (so no request is lost or piled up at 0), and the result is re-sorted.
How much jitter keeps the 10-s burst statistics is measured in docs/workloads.md (rule of
thumb: sigma well below the 10-s bin, e.g. <= 1 s, keeps peak-to-mean and spike share within a
few percent; sigma >= the bin width smears bursts across bins).

Mega-prompts: requests of ``prompt_tokens`` tokens injected every ``every_s`` seconds
(``mode="periodic"``, first at ``every_s``) or as a Poisson stream with that mean interval
(``mode="random"``), unannounced: nothing but their size marks them (their tenant and priority
are whatever you pass).
"""

from __future__ import annotations

import numpy as np

from inferencegym.workload.arrivals import Poisson

from .trace import Workload

__all__ = ["jitter", "inject_mega_prompts", "mega_prompt_mask"]


def jitter(w: Workload, sigma_s: float, rng: np.random.Generator) -> Workload:
    """Gaussian jitter of arrival times (sigma in seconds), reflected at 0, re-sorted."""
    if not (sigma_s >= 0 and np.isfinite(sigma_s)):
        raise ValueError(f"jitter: sigma_s must be a finite number >= 0, got {sigma_s}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"jitter: rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if sigma_s == 0 or len(w) == 0:
        return w
    a = np.abs(w.arrival_s + rng.normal(0.0, sigma_s, len(w)))
    order = np.argsort(a, kind="stable")
    moved = w._take(order, arrival_s=a[order])
    return moved


def inject_mega_prompts(w: Workload, *, prompt_tokens: int, every_s: float, rng: np.random.Generator,
                        output_tokens: int = 1, mode: str = "periodic", duration_s: float | None = None,
                        tenant: int = 0, priority: int = 0) -> Workload:
    """Add mega-prompts of ``prompt_tokens`` tokens to ``w`` over ``[0, duration_s)`` (default: up
    to the last arrival of ``w``)."""
    if prompt_tokens < 1 or output_tokens < 1:
        raise ValueError(f"inject_mega_prompts: prompt_tokens and output_tokens must be >= 1, got "
                         f"{prompt_tokens}, {output_tokens}")
    if not every_s > 0:
        raise ValueError(f"inject_mega_prompts: every_s must be > 0, got {every_s}")
    if mode not in ("periodic", "random"):
        raise ValueError(f"inject_mega_prompts: unknown mode '{mode}'; valid: periodic, random")
    end = float(duration_s) if duration_s is not None else (float(w.arrival_s[-1]) if len(w) else 0.0)
    if mode == "periodic":
        t = np.arange(every_s, end, every_s)
    else:
        t = Poisson(rate_per_s=1.0 / every_s).sample(end, rng)
    n = t.size
    mega = Workload.from_arrays(t, np.full(n, prompt_tokens), np.full(n, output_tokens), tenant, priority,
                                source=f"mega({prompt_tokens} tok, {mode} {every_s}s)")
    return Workload.merge([w, mega], source=w.source)


def mega_prompt_mask(w: Workload, min_prompt_tokens: int) -> np.ndarray:
    """Requests with a prompt of at least ``min_prompt_tokens`` (for analysis after the run)."""
    return w.prompt_tokens >= min_prompt_tokens
