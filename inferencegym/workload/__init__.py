"""Workloads: trace loaders, Parquet pools, fitted generators, jitter, mega-prompts, tenants,
statistics and spike detection.

    from inferencegym.workload import Workload, load_trace, default_fit, generate
    w = load_trace("AzureLLMInferenceTrace_conv.csv", format="azure")
    reqs = w.window(0, 600).scale_time(0.5).to_requests()
    g = generate(default_fit("azure_code"), 3600.0, numpy.random.default_rng(0))

Prefix-sharing traces (Mooncake, Qwen-Bailian JSONL) carry hash chains that become the simulator
requests' ``block_hashes``; `prefix_stats` measures their sharing and `generate_prefix_workload`
draws shared-prefix, multi-turn and agent workloads. See docs/workloads.md. Heavy libraries (pyarrow, scipy) are imported inside the functions that
need them.
"""

from typing import TYPE_CHECKING

# What the trace path needs is imported now (``inferencegym simulate --trace``: sources, loaders,
# hash chains); the generators, fits, statistics and tenant mixes on first use (PEP 562
# ``__getattr__`` below: ~40 ms of imports that replaying a trace does not need).
# ``prefix_stats`` stays eager: its module has the function's name, and a lazy attribute would be
# shadowed by the submodule once anything imports it.
from .hashchain import HashChainError, sim_block_hashes, sim_block_hashes_many
from .loaders import FORMATS, TraceFormatError, detect_format
from .pool import pool_metadata, prepare, read_pool, write_pool
from .prefix_loaders import PREFIX_FORMATS, load_prefix_trace
from .prefix_stats import prefix_stats
from .sources import load_any, load_trace
from .trace import Workload

_LAZY = {
    "inject_mega_prompts": "adversarial", "jitter": "adversarial", "mega_prompt_mask": "adversarial",
    "DEFAULT_FITS": "fit", "WorkloadFit": "fit", "default_fit": "fit", "fit_workload": "fit",
    "generate": "fit", "length_sampler": "fit",
    "PREFIX_FITS": "prefix_gen", "PrefixWorkloadSpec": "prefix_gen", "default_prefix_spec": "prefix_gen",
    "generate_prefix_mix": "prefix_gen", "generate_prefix_workload": "prefix_gen",
    "Spike": "stats", "compare": "stats", "detect_spikes": "stats", "trace_stats": "stats",
    "Tenant": "tenants", "TenantMix": "tenants",
}
"""Exported name -> the submodule that defines it (imported on first access)."""

if TYPE_CHECKING:  # the same names for type checkers and import-linter
    from .adversarial import inject_mega_prompts, jitter, mega_prompt_mask
    from .fit import DEFAULT_FITS, WorkloadFit, default_fit, fit_workload, generate, length_sampler
    from .prefix_gen import (PREFIX_FITS, PrefixWorkloadSpec, default_prefix_spec, generate_prefix_mix,
                             generate_prefix_workload)
    from .stats import Spike, compare, detect_spikes, trace_stats
    from .tenants import Tenant, TenantMix


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Workload", "load_trace", "load_any", "detect_format", "TraceFormatError", "FORMATS",
           "prepare", "read_pool", "write_pool", "pool_metadata",
           "WorkloadFit", "fit_workload", "generate", "default_fit", "length_sampler", "DEFAULT_FITS",
           "trace_stats", "compare", "detect_spikes", "Spike",
           "jitter", "inject_mega_prompts", "mega_prompt_mask", "Tenant", "TenantMix",
           "sim_block_hashes", "sim_block_hashes_many", "HashChainError", "load_prefix_trace", "PREFIX_FORMATS", "prefix_stats",
           "PrefixWorkloadSpec", "generate_prefix_workload", "generate_prefix_mix", "default_prefix_spec",
           "PREFIX_FITS"]
