"""Does generated traffic match a reference? Relative errors against tolerances.

Default tolerances (issue 3): mean rate 10 %, prompt/output p50/p90/p99 15 %, inter-arrival CV
25 %, peak-to-mean of 10-s counts 30 %.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TOLERANCES", "fidelity", "median_fidelity"]

TOLERANCES = {"rate_mean_per_s": 0.10, "iat_cv": 0.25, "peak_to_mean_10s": 0.30,
              **{f"{c}_{q}": 0.15 for c in ("prompt_tokens", "output_tokens") for q in ("p50", "p90", "p99")}}


def _flat(s: dict) -> dict:
    out = {k: s[k] for k in ("rate_mean_per_s", "iat_cv", "peak_to_mean_10s")}
    for c in ("prompt_tokens", "output_tokens"):
        for q in ("p50", "p90", "p99"):
            out[f"{c}_{q}"] = s[c][q]
    return out


def fidelity(generated: dict, reference: dict, tolerances: dict | None = None) -> dict:
    """``{metric: {"ref", "gen", "rel_err", "tol", "ok"}}`` for two `trace_stats` dicts."""
    tol = TOLERANCES if tolerances is None else tolerances
    g, r = _flat(generated), _flat(reference)
    out = {}
    for k, t in tol.items():
        err = (g[k] - r[k]) / r[k] if r[k] else float("nan")
        out[k] = {"ref": r[k], "gen": g[k], "rel_err": err, "tol": t, "ok": bool(abs(err) <= t)}
    return out


def median_fidelity(generated: list[dict], reference: dict, tolerances: dict | None = None) -> dict:
    """As `fidelity`, on the median over several generated traces of each metric."""
    flat = [_flat(s) for s in generated]
    med = {k: float(np.median([f[k] for f in flat])) for k in flat[0]}
    fake = {k: med[k] for k in ("rate_mean_per_s", "iat_cv", "peak_to_mean_10s")}
    for c in ("prompt_tokens", "output_tokens"):
        fake[c] = {q: med[f"{c}_{q}"] for q in ("p50", "p90", "p99")}
    return fidelity(fake, reference, tolerances)
