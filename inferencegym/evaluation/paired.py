"""Paired statistics over seeds: the project's 95 % interval and a paired-difference summary."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def ci95(values: list[float]) -> float:
    """Half-width of the 95 % t-interval of the mean of the finite ``values`` (0 for fewer than 2)."""
    a = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if a.size < 2:
        return 0.0
    from scipy import stats

    return float(stats.t.ppf(0.975, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))


def paired_difference(scores: Any, base: Any, tol: float = 0.0) -> dict[str, Any]:
    """Per-seed ``scores - base``: its mean, 95 % half-width, and the seeds better / worse by more
    than ``tol``."""
    d = np.asarray(scores, dtype=float) - np.asarray(base, dtype=float)
    return {"mean": float(d.mean()), "ci95": ci95(list(d)), "better": int((d > tol).sum()),
            "worse": int((d < -tol).sum())}


if __name__ == "__main__":
    print(paired_difference([0.9, 0.8, 0.85], [0.88, 0.81, 0.80]))
