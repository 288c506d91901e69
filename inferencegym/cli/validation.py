"""Checks of what the command line is given, before any work starts: option types and ranges,
YAML files, and output paths.

- :func:`read_yaml_mapping`: ``yaml.safe_load`` (no ``!!python`` tags), a mapping required, errors as
  one line naming the file.
- :class:`SimulateOptions`: the types and ranges of ``inferencegym simulate``'s options, whether they
  come from flags or a ``--config`` YAML (``rate: [1, 2]``, ``duration_s: .inf`` or
  ``replicas: 100000000`` fail fast with what was expected).
- :func:`check_output_path`: an output must not be a folder, must not be one of the inputs, and its
  parent folder must exist (outputs never create folders silently: the message says to create it).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_REPLICAS = 1024
"""Replicas a simulation may have (each holds per-replica state; more is a typo, not a cluster)."""
MAX_SIM_REQUESTS = 5_000_000
"""Generated requests at most (rate x duration): ~1 GB of request objects."""
MIN_BIN_S = 1e-3
"""Smallest bin width of rate statistics (``data spikes/fit --bin-s``)."""
MAX_BINS = 10_000_000
"""Most bins a trace may be cut into (span / bin width)."""


class OptionError(ValueError):
    """A command-line option or config value that is out of range or of the wrong type."""


def read_yaml_mapping(path: Path, what: str = "config") -> dict[str, Any]:
    """The YAML mapping in ``path`` (safe loader); :class:`OptionError` with the reason otherwise."""
    from inferencegym.safe_yaml import YamlInputError, read_yaml

    p = Path(path)
    try:
        data = read_yaml(p, f"{what} file")
    except YamlInputError as exc:
        raise OptionError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise OptionError(f"{p}: expected a mapping of option names to values, got {type(data).__name__}")
    return data


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError("must be a finite number")
    return v


class SimulateOptions(BaseModel):
    """Types and ranges of ``inferencegym simulate``'s options (extra keys pass unchecked)."""

    model_config = ConfigDict(extra="allow", strict=False)

    model: str = Field(min_length=1, max_length=128)
    gpu: str = Field(min_length=1, max_length=128)
    tensor_parallel: int = Field(ge=1, le=64)
    replicas: int = Field(ge=1, le=MAX_REPLICAS)
    router: str = Field(min_length=1, max_length=64)
    scheduler: str = Field(min_length=1, max_length=32)
    batch_cap: int = Field(ge=1, le=65_536)
    chunk_size: int = Field(ge=1, le=1_000_000)
    kv_budget_fraction: float = Field(gt=0.0, le=1.0)
    rate: float = Field(gt=0.0, le=100_000.0)
    duration_s: float | None = Field(None, gt=0.0, le=1e8)
    prompt_tokens: int = Field(ge=1, le=10_000_000)
    output_tokens: int = Field(ge=1, le=10_000_000)
    seed: int = Field(ge=0, le=2**63 - 1)
    speculation_depth: int = Field(ge=0, le=8)
    spec_acceptance: float = Field(ge=0.0, le=1.0)
    quantization: str = Field(min_length=1, max_length=16)
    disaggregate: bool
    prefill_replicas: int = Field(ge=1, le=MAX_REPLICAS)
    priority_routing: bool
    gpu_hour_usd: float | None = Field(None, ge=0.0, le=1e6)

    @field_validator("kv_budget_fraction", "rate", "duration_s", "spec_acceptance", "gpu_hour_usd",
                     mode="before")
    @classmethod
    def _no_inf(cls, v: Any) -> Any:
        if isinstance(v, (list, dict, bool)):
            raise ValueError(f"expected a number, got {type(v).__name__}")
        return _finite(v)


def validate_simulate_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Check ``opts`` (flags merged over the config); returns them with numbers of the right type."""
    try:
        checked = SimulateOptions.model_validate(opts)
    except ValidationError as exc:
        raise OptionError("; ".join(_describe(e) for e in exc.errors()[:5])) from None
    out = dict(opts)
    out.update(checked.model_dump(exclude_unset=False, include=set(SimulateOptions.model_fields)))
    if not out.get("trace"):
        dur = out["duration_s"] or 300.0
        if out["rate"] * dur > MAX_SIM_REQUESTS:
            raise OptionError(f"rate x duration_s = {out['rate'] * dur:.3g} requests; at most "
                              f"{MAX_SIM_REQUESTS:,} are generated: lower --rate or --duration-s")
    return out


def _describe(e: dict) -> str:
    loc = ".".join(str(x) for x in e.get("loc", ())) or "option"
    given = e.get("input")
    given_s = repr(given)
    if len(given_s) > 40:
        given_s = given_s[:40] + "..."
    return f"{loc}: {e.get('msg', 'invalid')} (given {given_s})"


def check_bins(span_s: float, bin_s: float) -> None:
    """``bin_s`` must be finite, >= :data:`MIN_BIN_S`, and cut ``span_s`` into <= :data:`MAX_BINS`."""
    if not (math.isfinite(bin_s) and bin_s >= MIN_BIN_S):
        raise OptionError(f"--bin-s must be a finite number >= {MIN_BIN_S:g} s, got {bin_s:g}")
    if math.isfinite(span_s) and span_s / bin_s > MAX_BINS:
        raise OptionError(f"--bin-s {bin_s:g} cuts the trace's {span_s:.6g} s into "
                          f"{span_s / bin_s:.3g} bins (at most {MAX_BINS:,}); use a larger --bin-s")


def check_output_path(output: Path, *, inputs: Iterable[Path | None] = (),
                      create_parents: bool = False) -> Path:
    """Refuse an output that is a folder, that is one of ``inputs``, or whose parent is missing
    (unless ``create_parents``, which then creates it)."""
    out = Path(output)
    if out.is_dir():
        raise OptionError(f"output {out} is a folder; give a file path inside it "
                          f"(e.g. {out / 'out.parquet'})")
    for i in inputs:
        if i is None:
            continue
        ip = Path(i)
        if ip.exists() and out.exists() and ip.resolve() == out.resolve() or \
                (not out.exists() and ip.resolve() == out.resolve()) or \
                (ip.exists() and out.exists() and ip.samefile(out)):
            raise OptionError(f"output {out} is the input {ip}: writing it would replace the input; "
                              f"choose another output path")
    parent = out.parent
    if not parent.exists():
        if not create_parents:
            raise OptionError(f"the folder of output {out} does not exist: create it first "
                              f"(mkdir -p {parent})")
        parent.mkdir(parents=True)
    elif not parent.is_dir():
        raise OptionError(f"{parent} is not a folder")
    return out


__all__ = ["OptionError", "read_yaml_mapping", "SimulateOptions", "validate_simulate_options",
           "check_output_path", "check_bins", "MAX_REPLICAS", "MAX_SIM_REQUESTS", "MIN_BIN_S",
           "MAX_BINS"]
