"""Length samplers: (prompt_tokens, output_tokens) pairs.

- `CopulaLengths` (the fitted default): each marginal is a monotone quantile function (a
  107-point table, denser in the tails) and the pair is joined by a Gaussian copula on the normal
  scores, so the prompt-output rank correlation of the trace is reproduced.
- `LognormalLengths`: independent lognormal marginals (BurstGPT paper style), optional correlation
  of the log lengths.
- `ZipfLengths`: Zipf-distributed prompts (BurstGPT's fit for request tokens) with lognormal outputs.
- `EmpiricalLengths`: resample (prompt, output) pairs from a pool (joint law exactly as observed).

Clipping (stated, never silent): every sampler returns integers clipped to
``[min_tokens, max_tokens]`` per column (defaults from the fitted data's min and max, at least 1).
Parametric tails (lognormal, Zipf) are the ones the clip truncates.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from inferencegym.sim import portable_math

__all__ = ["CopulaLengths", "LognormalLengths", "ZipfLengths", "EmpiricalLengths", "lengths_from_dict",
           "fit_copula_lengths", "fit_parametric_lengths", "LENGTH_KINDS"]

# probability levels of the quantile tables: dense in both tails
PROB_LEVELS = tuple(np.round(np.concatenate((
    [0.0, 0.001, 0.0025, 0.005], np.linspace(0.01, 0.99, 99), [0.995, 0.9975, 0.999, 1.0])), 6).tolist())


def _clip_round(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.rint(x), lo, hi).astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class CopulaLengths:
    """Quantile-table marginals joined by a Gaussian copula."""

    levels: tuple[float, ...]
    """Probability levels of the tables (0..1)."""
    prompt_quantiles: tuple[float, ...]
    """Prompt-token quantiles at `levels`."""
    output_quantiles: tuple[float, ...]
    """Output-token quantiles at `levels`."""
    rho: float = 0.0
    """Correlation of the normal scores of prompt and output (Gaussian copula)."""
    min_tokens: tuple[int, int] = (1, 1)
    """Lower clip (prompt, output)."""
    max_tokens: tuple[int, int] = (1 << 20, 1 << 20)
    """Upper clip (prompt, output)."""

    def __post_init__(self):
        if not (len(self.levels) == len(self.prompt_quantiles) == len(self.output_quantiles) >= 2):
            raise ValueError("CopulaLengths: levels and quantile tables must have the same length >= 2")
        if not -1 < self.rho < 1:
            raise ValueError(f"CopulaLengths: rho must be in (-1, 1), got {self.rho}")

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        from scipy.special import ndtr

        z1 = rng.standard_normal(n)
        z2 = self.rho * z1 + math.sqrt(1 - self.rho ** 2) * rng.standard_normal(n)
        lv = np.asarray(self.levels)
        p = np.interp(ndtr(z1), lv, self.prompt_quantiles)
        o = np.interp(ndtr(z2), lv, self.output_quantiles)
        return (_clip_round(p, self.min_tokens[0], self.max_tokens[0]),
                _clip_round(o, self.min_tokens[1], self.max_tokens[1]))

    def to_dict(self):
        d = asdict(self)
        return {"kind": "copula", **{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}}


@dataclass(frozen=True, kw_only=True)
class LognormalLengths:
    """Lognormal prompt and output lengths (parameters of log tokens), optionally correlated."""

    prompt_mu: float
    """Mean of log prompt tokens."""
    prompt_sigma: float
    """Std of log prompt tokens."""
    output_mu: float
    """Mean of log output tokens."""
    output_sigma: float
    """Std of log output tokens."""
    rho: float = 0.0
    """Correlation of the two logs."""
    min_tokens: tuple[int, int] = (1, 1)
    """Lower clip (prompt, output)."""
    max_tokens: tuple[int, int] = (32768, 32768)
    """Upper clip (prompt, output): the lognormal tail beyond is truncated to this value."""

    def sample(self, n, rng):
        z1 = rng.standard_normal(n)
        z2 = self.rho * z1 + math.sqrt(1 - self.rho ** 2) * rng.standard_normal(n)
        p = portable_math.exp(self.prompt_mu + self.prompt_sigma * z1)
        o = portable_math.exp(self.output_mu + self.output_sigma * z2)
        return (_clip_round(p, self.min_tokens[0], self.max_tokens[0]),
                _clip_round(o, self.min_tokens[1], self.max_tokens[1]))

    def to_dict(self):
        d = asdict(self)
        return {"kind": "lognormal", **{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}}


@dataclass(frozen=True, kw_only=True)
class ZipfLengths:
    """Zipf(a) prompt tokens (support 1, 2, ...) and lognormal outputs, independent."""

    prompt_a: float
    """Zipf exponent (> 1)."""
    output_mu: float
    """Mean of log output tokens."""
    output_sigma: float
    """Std of log output tokens."""
    min_tokens: tuple[int, int] = (1, 1)
    """Lower clip (prompt, output)."""
    max_tokens: tuple[int, int] = (32768, 32768)
    """Upper clip (prompt, output): the Zipf tail beyond is truncated to this value."""

    def __post_init__(self):
        if not self.prompt_a > 1:
            raise ValueError(f"ZipfLengths: prompt_a must be > 1, got {self.prompt_a}")

    def sample(self, n, rng):
        p = np.minimum(rng.zipf(self.prompt_a, n), self.max_tokens[0])
        o = portable_math.exp(self.output_mu + self.output_sigma * rng.standard_normal(n))
        return (_clip_round(p, self.min_tokens[0], self.max_tokens[0]),
                _clip_round(o, self.min_tokens[1], self.max_tokens[1]))

    def to_dict(self):
        d = asdict(self)
        return {"kind": "zipf", **{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}}


@dataclass(frozen=True, eq=False)
class EmpiricalLengths:
    """Resample (prompt, output) pairs with replacement from observed pairs (e.g. a pool)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self):
        if len(self.prompt_tokens) == 0 or len(self.prompt_tokens) != len(self.output_tokens):
            raise ValueError("EmpiricalLengths: need equally long, non-empty prompt and output arrays")

    @classmethod
    def from_workload(cls, w) -> "EmpiricalLengths":
        ok = ~w.failed
        return cls(np.maximum(w.prompt_tokens[ok], 1), w.output_tokens[ok])

    def sample(self, n, rng):
        idx = rng.integers(0, len(self.prompt_tokens), n)
        return (np.asarray(self.prompt_tokens, np.int64)[idx], np.asarray(self.output_tokens, np.int64)[idx])

    def to_dict(self):
        raise TypeError("EmpiricalLengths holds rows; it is not serialised into fits (use a pool file)")


LENGTH_KINDS = {"copula": CopulaLengths, "lognormal": LognormalLengths, "zipf": ZipfLengths}


def lengths_from_dict(d: dict):
    d = dict(d)
    kind = d.pop("kind", None)
    if kind not in LENGTH_KINDS:
        raise ValueError(f"unknown length sampler '{kind}'; valid: {', '.join(sorted(LENGTH_KINDS))}")
    for k, v in list(d.items()):
        if isinstance(v, list):
            d[k] = tuple(int(x) for x in v) if k in ("min_tokens", "max_tokens") else tuple(v)
    try:
        return LENGTH_KINDS[kind](**d)
    except TypeError as exc:
        raise ValueError(f"bad parameters for length sampler '{kind}': {exc}") from None


def fit_copula_lengths(prompt: np.ndarray, output: np.ndarray) -> CopulaLengths:
    """Quantile tables of both marginals, and the Gaussian-copula correlation
    ``rho = 2 sin(pi rho_S / 6)`` from the Spearman correlation ``rho_S`` of the pairs."""
    p = np.asarray(prompt, np.float64)
    o = np.asarray(output, np.float64)
    if p.size < 2:
        raise ValueError("fit_copula_lengths: need at least two requests with lengths")
    rho = 0.0
    if p.std() > 0 and o.std() > 0:
        from scipy.stats import spearmanr
        # Gaussian copula parameter that reproduces the observed Spearman rank correlation
        rho = float(np.clip(2 * math.sin(math.pi * spearmanr(p, o).statistic / 6), -0.999, 0.999))
    lv = np.asarray(PROB_LEVELS)
    return CopulaLengths(levels=PROB_LEVELS,
                         prompt_quantiles=tuple(float(x) for x in np.quantile(p, lv)),
                         output_quantiles=tuple(float(x) for x in np.quantile(o, lv)),
                         rho=rho,
                         min_tokens=(max(1, int(p.min())), max(1, int(o.min()))),
                         max_tokens=(max(1, int(p.max())), max(1, int(o.max()))))


def _zipf_fit(x: np.ndarray) -> float:
    from scipy.optimize import minimize_scalar
    from scipy.special import zeta

    x = x[x >= 1]
    s = np.log(x).sum()
    n = x.size

    def nll(a):
        return a * s + n * math.log(zeta(a))

    r = minimize_scalar(nll, bounds=(1.0001, 10.0), method="bounded")
    return float(r.x)


def fit_parametric_lengths(prompt: np.ndarray, output: np.ndarray) -> dict:
    """Lognormal (both columns) and Zipf (prompt) MLE fits with KS statistics, for reporting and
    for use as ``{"kind": "lognormal"|"zipf", ...}`` samplers."""
    from scipy import stats as sst

    p = np.maximum(np.asarray(prompt, np.float64), 1)
    o = np.maximum(np.asarray(output, np.float64), 1)
    lp, lo = np.log(p), np.log(o)
    rho = float(np.corrcoef(lp, lo)[0, 1]) if lp.std() > 0 and lo.std() > 0 else 0.0
    mx = (int(p.max()), int(o.max()))
    logn = LognormalLengths(prompt_mu=float(lp.mean()), prompt_sigma=float(lp.std()), output_mu=float(lo.mean()),
                            output_sigma=float(lo.std()), rho=rho, max_tokens=mx)
    a = _zipf_fit(p)
    zipf = ZipfLengths(prompt_a=a, output_mu=float(lo.mean()), output_sigma=float(lo.std()), max_tokens=mx)
    ks_logn_p = float(sst.kstest(p, "lognorm", args=(logn.prompt_sigma, 0, math.exp(logn.prompt_mu))).statistic)
    ks_logn_o = float(sst.kstest(o, "lognorm", args=(logn.output_sigma, 0, math.exp(logn.output_mu))).statistic)
    ks_zipf_p = float(sst.kstest(p, sst.zipf(a).cdf).statistic)
    return {"lognormal": {**logn.to_dict(), "ks_prompt": ks_logn_p, "ks_output": ks_logn_o},
            "zipf": {**zipf.to_dict(), "ks_prompt": ks_zipf_p, "ks_output": ks_logn_o}}
