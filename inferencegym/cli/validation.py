"""Checks of what the command line is given, before any work starts: option types and ranges,
YAML files, and output paths.

- :func:`read_yaml_mapping`: ``yaml.safe_load`` (no ``!!python`` tags), a mapping required, errors as
  one line naming the file.
- :data:`SIMULATE_RULES`: the types and ranges of ``inferencegym simulate``'s options, whether they
  come from flags or a ``--config`` YAML (``rate: [1, 2]``, ``duration_s: .inf`` or
  ``replicas: 100000000`` fail fast with what was expected); checked in plain Python when every
  value already fits, else by their pydantic model (``SimulateOptions``, coercion and messages).
- :func:`check_output_path`: an output must not be a folder, must not be one of the inputs, and its
  parent folder must exist (outputs never create folders silently: the message says to create it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable


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


@dataclass(frozen=True, kw_only=True)
class OptionRule:
    """Type and range of one ``simulate`` option (the one definition: :data:`SIMULATE_RULES`)."""

    kind: type
    """``int``, ``float``, ``str`` or ``bool``."""
    optional: bool = False
    """``None`` is accepted (and is the default when the option is absent)."""
    ge: float | None = None
    """Inclusive lower bound of a number."""
    gt: float | None = None
    """Exclusive lower bound of a number."""
    le: float | None = None
    """Inclusive upper bound of a number."""
    min_length: int | None = None
    """Fewest characters of a string."""
    max_length: int | None = None
    """Most characters of a string."""

    def accepts(self, v: Any) -> bool:
        """``v`` is already of this type and in range, so the pydantic model returns it unchanged
        (an ``int`` for a ``float`` option: as ``float(v)``). False means "let pydantic decide"
        (it may still coerce ``"3"`` or ``2.0``, or it reports the error)."""
        t = type(v)
        k = self.kind
        if v is None:
            return self.optional
        if k is float:
            if t is not float and t is not int:
                return False
            if not math.isfinite(v):
                return False
        elif t is not k:
            return False
        if k is str:
            n = len(v)
            return not ((self.min_length is not None and n < self.min_length)
                        or (self.max_length is not None and n > self.max_length))
        if k is bool:
            return True
        return not ((self.ge is not None and not v >= self.ge) or (self.gt is not None and not v > self.gt)
                    or (self.le is not None and not v <= self.le))


SIMULATE_RULES: dict[str, OptionRule] = {
    "model": OptionRule(kind=str, min_length=1, max_length=128),
    "gpu": OptionRule(kind=str, min_length=1, max_length=128),
    "tensor_parallel": OptionRule(kind=int, ge=1, le=64),
    "replicas": OptionRule(kind=int, ge=1, le=MAX_REPLICAS),
    "router": OptionRule(kind=str, min_length=1, max_length=64),
    "scheduler": OptionRule(kind=str, min_length=1, max_length=32),
    "batch_cap": OptionRule(kind=int, ge=1, le=65_536),
    "chunk_size": OptionRule(kind=int, ge=1, le=1_000_000),
    "kv_budget_fraction": OptionRule(kind=float, gt=0.0, le=1.0),
    "rate": OptionRule(kind=float, gt=0.0, le=100_000.0),
    "duration_s": OptionRule(kind=float, optional=True, gt=0.0, le=1e8),
    "prompt_tokens": OptionRule(kind=int, ge=1, le=10_000_000),
    "output_tokens": OptionRule(kind=int, ge=1, le=10_000_000),
    "seed": OptionRule(kind=int, ge=0, le=2**63 - 1),
    "speculation_depth": OptionRule(kind=int, ge=0, le=8),
    "spec_acceptance": OptionRule(kind=float, ge=0.0, le=1.0),
    "quantization": OptionRule(kind=str, min_length=1, max_length=16),
    "disaggregate": OptionRule(kind=bool),
    "prefill_replicas": OptionRule(kind=int, ge=1, le=MAX_REPLICAS),
    "priority_routing": OptionRule(kind=bool),
    "gpu_hour_usd": OptionRule(kind=float, optional=True, ge=0.0, le=1e6),
}
"""Types and ranges of ``inferencegym simulate``'s options, whether they come from flags or a
``--config`` YAML (extra keys pass unchecked). :func:`simulate_options_model` makes the pydantic
model of them; :func:`validate_simulate_options` skips it when every value already has its type
and range (the usual case: ~0.1 CPU s of pydantic import and model build at every start)."""


def simulate_options_model():
    """The pydantic model of :data:`SIMULATE_RULES` (built once, on first use): lax coercion
    (``"3"`` -> 3) and the error messages; NaN, infinities, lists and dicts refused for floats."""
    global _MODEL
    if _MODEL is not None:
        return _MODEL
    from pydantic import ConfigDict, Field, create_model, field_validator

    fields: dict[str, Any] = {}
    for name, r in SIMULATE_RULES.items():
        kw = {k: getattr(r, k) for k in ("ge", "gt", "le", "min_length", "max_length")
              if getattr(r, k) is not None}
        fields[name] = ((r.kind | None, Field(None, **kw)) if r.optional else (r.kind, Field(**kw)))

    def _no_inf(cls, v: Any) -> Any:
        if isinstance(v, (list, dict, bool)):
            raise ValueError(f"expected a number, got {type(v).__name__}")
        return _finite(v)

    floats = [n for n, r in SIMULATE_RULES.items() if r.kind is float]
    _MODEL = create_model("SimulateOptions", __config__=ConfigDict(extra="allow", strict=False),
                          __doc__="Types and ranges of ``inferencegym simulate``'s options "
                                  "(extra keys pass unchecked).",
                          __validators__={"_no_inf": field_validator(*floats, mode="before")(classmethod(_no_inf))},
                          **fields)
    return _MODEL


_MODEL = None


def __getattr__(name: str):
    if name == "SimulateOptions":  # (the pydantic model, built on first use)
        return simulate_options_model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def validate_simulate_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Check ``opts`` (flags merged over the config); returns them with numbers of the right type."""
    out = dict(opts)
    if all(k in opts and r.accepts(opts[k]) for k, r in SIMULATE_RULES.items()):
        for k, r in SIMULATE_RULES.items():  # what the model would return: ints of floats as floats
            if r.kind is float and type(out[k]) is int:
                out[k] = float(out[k])
    else:
        from pydantic import ValidationError

        model = simulate_options_model()
        try:
            checked = model.model_validate(opts)
        except ValidationError as exc:
            raise OptionError("; ".join(_describe(e) for e in exc.errors()[:5])) from None
        out.update(checked.model_dump(exclude_unset=False, include=set(model.model_fields)))
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


__all__ = ["OptionError", "read_yaml_mapping", "SimulateOptions", "SIMULATE_RULES", "OptionRule",
           "simulate_options_model", "validate_simulate_options",
           "check_output_path", "check_bins", "MAX_REPLICAS", "MAX_SIM_REQUESTS", "MIN_BIN_S",
           "MAX_BINS"]
