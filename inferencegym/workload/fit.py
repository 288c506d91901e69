"""Fitting a generator to a trace, and drawing workloads from a fit.

A fit is plain JSON (`WorkloadFit.save` / `WorkloadFit.load`): an arrival process dict, a length
sampler dict, the statistics of the trace it came from, and the alternative parametric fits
(Poisson / Gamma / Weibull inter-arrivals, lognormal / Zipf lengths, each with its KS statistic)
for reference. Fits hold figures only, never rows. The shipped fits of the Azure 2023 traces are
the defaults: ``default_fit("azure_conv")`` / ``default_fit("azure_code")``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inferencegym.workload.stats import trace_stats

from .arrival_registry import arrival_from_dict
from .arrivals import fit_renewal
from .arrivals_markov import fit_markov_bins
from .lengths import fit_copula_lengths, fit_parametric_lengths, lengths_from_dict
from .trace import Workload

__all__ = ["WorkloadFit", "fit_workload", "generate", "default_fit", "length_sampler", "DEFAULT_FITS",
           "atomic_write_bytes"]

SCHEMA = "inferencegym.workload.fit/1"
DEFAULT_FITS = {"azure_conv": "azure_conv.json", "azure_code": "azure_code.json"}
FITS_DIR = Path(__file__).resolve().parent.parent / "data" / "fits"
"""Package data folder of the shipped fits (rebuilt by ``python -m inferencegym.workload.shipped``)."""


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename, so a
    failure never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass(frozen=True, kw_only=True)
class WorkloadFit:
    """A fitted workload generator (JSON-serialisable)."""

    arrival: dict
    """Arrival process, ``{"kind": ..., **params}`` (see `inferencegym.workload.arrivals`)."""
    lengths: dict
    """Length sampler, ``{"kind": ..., **params}`` (see `inferencegym.workload.lengths`)."""
    source: str = ""
    """What it was fitted to."""
    source_stats: dict = field(default_factory=dict)
    """`trace_stats` of the source trace (to compare generated traffic against)."""
    alternatives: dict = field(default_factory=dict)
    """Other fits for reference: ``{"arrival": {...}, "lengths": {...}}`` with KS statistics."""

    def __post_init__(self):
        arrival_from_dict(self.arrival)  # validates
        lengths_from_dict(self.lengths)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "source": self.source, "arrival": self.arrival, "lengths": self.lengths,
                "source_stats": self.source_stats, "alternatives": self.alternatives}

    @classmethod
    def from_dict(cls, d: dict) -> "WorkloadFit":
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a workload fit: expected schema '{SCHEMA}', got {d.get('schema')!r}")
        for k in ("arrival", "lengths"):
            if not isinstance(d.get(k), dict):
                raise ValueError(f"workload fit: missing or invalid '{k}' section")
        return cls(arrival=d["arrival"], lengths=d["lengths"], source=d.get("source", ""),
                   source_stats=d.get("source_stats", {}), alternatives=d.get("alternatives", {}))

    def save(self, path: str | Path) -> None:
        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n").encode())

    @classmethod
    def load(cls, path: str | Path) -> "WorkloadFit":
        from .jsonio import read_json  # jsonio imports nothing of the package

        path = Path(path)
        d = read_json(path, "workload fit")
        if not isinstance(d, dict):
            raise ValueError(f"{path}: not a workload fit (expected a JSON object, got {type(d).__name__})")
        try:
            return cls.from_dict(d)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def with_rate(self, rate_per_s: float) -> "WorkloadFit":
        """The same fit with its arrival process rescaled to ``rate_per_s`` (for `markov_bins`,
        `poisson`, `gamma`, `weibull`)."""
        a = dict(self.arrival)
        if "rate_per_s" not in a:
            raise ValueError(f"with_rate: arrival process '{a.get('kind')}' has no rate_per_s")
        if a["kind"] == "markov_bins":
            f = rate_per_s / a["rate_per_s"]
            a["class_quantiles"] = [[x * f for x in row] for row in a["class_quantiles"]]
            a["tail_scale"] = a.get("tail_scale", 0.0) * f
        a["rate_per_s"] = float(rate_per_s)
        return WorkloadFit(arrival=a, lengths=self.lengths, source=self.source,
                           source_stats=self.source_stats, alternatives=self.alternatives)


def fit_workload(w: Workload, *, bin_s: float = 10.0, source: str | None = None) -> WorkloadFit:
    """Fit the default generator (`MarkovBins` arrivals + `CopulaLengths`) to a workload.

    Failed rows (0 output tokens) count as arrivals but not for lengths.
    """
    if len(w) < 3:
        raise ValueError(f"fit_workload: need at least 3 requests, got {len(w)}")
    ok = ~w.failed
    if ok.sum() < 2:
        raise ValueError("fit_workload: need at least 2 requests that did not fail")
    arrival = fit_markov_bins(w.arrival_s, bin_s=bin_s)
    p, o = w.prompt_tokens[ok], w.output_tokens[ok]
    lengths = fit_copula_lengths(p, o)
    alt = {"arrival": fit_renewal(w.arrival_s), "lengths": fit_parametric_lengths(p, o)}
    return WorkloadFit(arrival=arrival.to_dict(), lengths=lengths.to_dict(),
                       source=w.source if source is None else source,
                       source_stats=trace_stats(w), alternatives=alt)


def generate(fit: WorkloadFit | dict | str | Path, duration_s: float, rng: np.random.Generator, *,
             tenant: int = 0, priority: int = 0, source: str | None = None) -> Workload:
    """Draw a workload of ``duration_s`` seconds from a fit (a `WorkloadFit`, its dict, a JSON
    path, or a default name like ``"azure_conv"``). Same fit + same rng state = same workload."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"generate: rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(fit, str) and fit in DEFAULT_FITS:
        fit = default_fit(fit)
    elif isinstance(fit, (str, Path)):
        fit = WorkloadFit.load(fit)
    elif isinstance(fit, dict):
        fit = WorkloadFit.from_dict(fit)
    arr = arrival_from_dict(fit.arrival).sample(float(duration_s), rng)
    p, o = lengths_from_dict(fit.lengths).sample(arr.size, rng)
    return Workload.from_arrays(arr, p, o, tenant, priority, sort=False,
                                source=source if source is not None else f"generated({fit.source})")


def length_sampler(fit: WorkloadFit | dict | str | Path):
    """The length sampler of a fit (``.sample(n, rng) -> (prompt_tokens, output_tokens)``), e.g.
    ``length_sampler("azure_conv")`` for the shipped conversation-trace lengths."""
    if isinstance(fit, str) and fit in DEFAULT_FITS:
        fit = default_fit(fit)
    elif isinstance(fit, (str, Path)):
        fit = WorkloadFit.load(fit)
    elif isinstance(fit, dict):
        fit = WorkloadFit.from_dict(fit)
    return lengths_from_dict(fit.lengths)


def default_fit(name: str = "azure_conv") -> WorkloadFit:
    """A shipped fit: ``"azure_conv"`` (conversation service, ~5.5 req/s, near-Poisson) or
    ``"azure_code"`` (code completion, ~2.6 req/s, very bursty)."""
    if name not in DEFAULT_FITS:
        raise ValueError(f"unknown default fit '{name}'; valid: {', '.join(sorted(DEFAULT_FITS))}")
    return WorkloadFit.from_dict(json.loads((FITS_DIR / DEFAULT_FITS[name]).read_text()))
