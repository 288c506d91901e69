"""Trace statistics, two-trace comparison (with KS tests) and spike detection.

Definitions follow ``trace_stats.json`` of the reference data (all on arrivals sorted by time):

- ``rate_mean_per_s``: N / (t_last - t_first)
- ``iat_cv``: std / mean of inter-arrival times (zeros included)
- ``peak_to_mean_10s``: max / mean of per-10-s counts (bins from t_first, empty bins included,
  the last partial bin dropped when there is more than one bin)
- ``spike_frac_10s_2x``: share of 10-s bins whose count is > 2 x the mean 10-s count
- length percentiles with numpy's default (linear) interpolation; failed rows (0 output) excluded
- ``prompt_output_corr``: Pearson correlation of log1p lengths, plus Spearman.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .trace import Workload

__all__ = ["bin_counts", "trace_stats", "compare", "detect_spikes", "Spike", "format_compare"]


def bin_counts(arrival_s: np.ndarray, bin_s: float = 10.0) -> np.ndarray:
    """Counts of arrivals in consecutive ``bin_s`` bins from the first arrival.

    The last, partial bin is dropped when there is more than one bin (it would look like a dip).
    """
    a = np.asarray(arrival_s, np.float64)
    if a.size == 0:
        return np.zeros(0, np.int64)
    rel = a - a[0]
    span = rel[-1]
    nfull = int(np.floor(span / bin_s))
    if nfull < 1:
        return np.array([a.size], np.int64)
    idx = np.floor(rel / bin_s).astype(np.int64)
    counts = np.bincount(idx, minlength=nfull + 1)
    return counts[:nfull]


def _iat(a: np.ndarray) -> np.ndarray:
    return np.diff(np.asarray(a, np.float64))


def _pcts(x: np.ndarray) -> dict[str, float]:
    if x.size == 0:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "mean": float("nan")}
    p = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2])}


def _avg_ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank), as scipy.stats.rankdata, without importing scipy."""
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    upto = np.cumsum(counts) - counts  # values strictly below
    return (upto + (counts + 1) / 2.0)[inv]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    if x.size < 3:
        return float("nan")
    rx, ry = _avg_ranks(x), _avg_ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def trace_stats(w: Workload, *, bin_s: float = 10.0) -> dict:
    """Summary statistics of one workload (the figures `compare` prints)."""
    a = w.arrival_s
    ok = ~w.failed
    n = len(w)
    span = w.span_s
    iat = _iat(a)
    counts = bin_counts(a, bin_s)
    mean_c = counts.mean() if counts.size else float("nan")
    p, o = w.prompt_tokens[ok].astype(np.float64), w.output_tokens[ok].astype(np.float64)
    corr = spear = float("nan")
    if p.size > 2 and p.std() > 0 and o.std() > 0:
        corr = float(np.corrcoef(np.log1p(p), np.log1p(o))[0, 1])
        spear = spearman(p, o)
    return {
        "n_requests": n,
        "n_failed": int(np.count_nonzero(~ok)),
        "span_s": span,
        "rate_mean_per_s": n / span if span > 0 else float("nan"),
        "iat_mean_s": float(iat.mean()) if iat.size else float("nan"),
        "iat_cv": float(iat.std() / iat.mean()) if iat.size and iat.mean() > 0 else float("nan"),
        "bins_10s": int(counts.size),
        "mean_per_bin": float(mean_c),
        "peak_to_mean_10s": float(counts.max() / mean_c) if counts.size and mean_c > 0 else float("nan"),
        "spike_frac_10s_2x": float(np.mean(counts > 2 * mean_c)) if counts.size else float("nan"),
        "empty_frac_10s": float(np.mean(counts == 0)) if counts.size else float("nan"),
        "prompt_tokens": _pcts(p),
        "output_tokens": _pcts(o),
        "prompt_output_corr_log": corr,
        "prompt_output_spearman": spear,
    }


def compare(a: Workload, b: Workload, *, bin_s: float = 10.0) -> dict:
    """Statistics of two workloads side by side, with two-sample KS tests (scipy.stats.ks_2samp)
    on inter-arrival times, prompt lengths and output lengths, and relative differences (b vs a)."""
    from scipy import stats as sst

    sa, sb = trace_stats(a, bin_s=bin_s), trace_stats(b, bin_s=bin_s)
    ks = {}
    pairs = {"iat_s": (_iat(a.arrival_s), _iat(b.arrival_s)),
             "prompt_tokens": (a.prompt_tokens[~a.failed], b.prompt_tokens[~b.failed]),
             "output_tokens": (a.output_tokens[~a.failed], b.output_tokens[~b.failed])}
    for name, (x, y) in pairs.items():
        if x.size and y.size:
            r = sst.ks_2samp(x, y)
            ks[name] = {"statistic": float(r.statistic), "pvalue": float(r.pvalue)}
        else:
            ks[name] = {"statistic": float("nan"), "pvalue": float("nan")}

    def rel(x, y):
        return float((y - x) / x) if x not in (0, None) and np.isfinite(x) and np.isfinite(y) else float("nan")

    diff = {k: rel(sa[k], sb[k]) for k in ("rate_mean_per_s", "iat_cv", "peak_to_mean_10s")}
    for k in ("prompt_tokens", "output_tokens"):
        for q in ("p50", "p90", "p99"):
            diff[f"{k}_{q}"] = rel(sa[k][q], sb[k][q])
    return {"a": {"source": a.source, **sa}, "b": {"source": b.source, **sb}, "ks": ks, "rel_diff": diff}


def format_compare(result: dict) -> list[tuple[str, str, str, str]]:
    """Rows (metric, A, B, B vs A) for printing a comparison as a table."""
    a, b, d = result["a"], result["b"], result["rel_diff"]

    def f(x, nd=3):
        return "nan" if x is None or not np.isfinite(x) else f"{x:.{nd}g}"

    def pct(x):
        return "" if x is None or not np.isfinite(x) else f"{100 * x:+.1f}%"

    rows = [("requests", str(a["n_requests"]), str(b["n_requests"]), ""),
            ("span (s)", f(a["span_s"], 6), f(b["span_s"], 6), ""),
            ("mean rate (req/s)", f(a["rate_mean_per_s"], 4), f(b["rate_mean_per_s"], 4),
             pct(d["rate_mean_per_s"])),
            ("inter-arrival CV", f(a["iat_cv"]), f(b["iat_cv"]), pct(d["iat_cv"])),
            ("peak-to-mean of 10-s counts", f(a["peak_to_mean_10s"]), f(b["peak_to_mean_10s"]),
             pct(d["peak_to_mean_10s"])),
            ("10-s windows > 2x mean", f(a["spike_frac_10s_2x"]), f(b["spike_frac_10s_2x"]), "")]
    for k, label in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        for q in ("p50", "p90", "p99"):
            rows.append((f"{label} {q}", f(a[k][q], 5), f(b[k][q], 5), pct(d[f"{k}_{q}"])))
    rows.append(("prompt-output corr (log)", f(a["prompt_output_corr_log"]), f(b["prompt_output_corr_log"]), ""))
    for name, r in result["ks"].items():
        rows.append((f"KS {name}", "", f"D={f(r['statistic'])} p={f(r['pvalue'])}", ""))
    return rows


@dataclass(frozen=True)
class Spike:
    """One spike: consecutive bins above the threshold."""

    start_s: float
    """Start of the first spiking bin (trace time)."""
    end_s: float
    """End of the last spiking bin."""
    peak_rate_per_s: float
    """Highest bin rate inside the spike (requests/s)."""
    requests: int
    """Arrivals inside the spike."""

    def to_dict(self) -> dict:
        return {"start_s": self.start_s, "end_s": self.end_s, "peak_rate_per_s": self.peak_rate_per_s,
                "requests": self.requests}


def detect_spikes(w: Workload, *, bin_s: float = 10.0, threshold: float = 2.0,
                  local_window_s: float | None = None, min_bins: int = 1) -> list[Spike]:
    """Spike windows: runs of >= ``min_bins`` bins whose count exceeds ``threshold`` x the mean.

    The mean is the global mean count per bin, or with ``local_window_s`` a centred rolling mean
    over that many seconds (detects spikes relative to the local level, e.g. under a diurnal cycle).
    """
    if threshold <= 0 or bin_s <= 0 or min_bins < 1:
        raise ValueError(f"detect_spikes: need threshold > 0, bin_s > 0, min_bins >= 1; got "
                         f"{threshold}, {bin_s}, {min_bins}")
    counts = bin_counts(w.arrival_s, bin_s).astype(np.float64)
    if counts.size == 0:
        return []
    if local_window_s:
        k = max(1, int(round(local_window_s / bin_s)))
        kernel = np.ones(k) / k
        pad = np.pad(counts, (k // 2, k - 1 - k // 2), mode="edge")
        base = np.convolve(pad, kernel, mode="valid")
    else:
        base = np.full(counts.size, counts.mean())
    hot = counts > threshold * base
    t0 = float(w.arrival_s[0])
    spikes: list[Spike] = []
    i = 0
    while i < hot.size:
        if not hot[i]:
            i += 1
            continue
        j = i
        while j + 1 < hot.size and hot[j + 1]:
            j += 1
        if j - i + 1 >= min_bins:
            spikes.append(Spike(t0 + i * bin_s, t0 + (j + 1) * bin_s, float(counts[i:j + 1].max() / bin_s),
                                int(counts[i:j + 1].sum())))
        i = j + 1
    return spikes
