"""The one SLO rule: whether a finished request met its tenant's latency targets.

Convention (DistServe, vLLM's ``benchmark_serving``/``vllm bench serve`` goodput, SGLang's bench):
a request meets its SLO when its time to first token is within the TTFT target **and** its
time per output token (TPOT: the mean gap between consecutive output tokens after the first,
``tbt_sum_s / (output_tokens - 1)``) is within the TBT target. The largest single gap is a
stricter, tail-of-one-request criterion that no production goodput metric uses: it is reported
(``tbt_max_s``, TBT percentiles) but it is not the SLO.

Every consumer uses these two functions: the simulator's window goodput, both environments'
rewards and both graders. The scalar form serves per-request code; the vectorised form serves
per-request tables (numpy arrays of one episode).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only
    from .config import TenantSpec
    from .request import Request

__all__ = ["meets_slo", "meets_slo_table", "request_tpot_s"]


def request_tpot_s(output_tokens, tbt_sum_s):
    """Mean time per output token after the first (0 for one-token outputs); scalar or array."""
    if isinstance(output_tokens, np.ndarray):
        n = output_tokens - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, tbt_sum_s / np.maximum(n, 1), 0.0)
    n = output_tokens - 1
    return tbt_sum_s / n if n > 0 else 0.0


def meets_slo(request: Request, tenant: TenantSpec) -> bool:
    """Whether one finished request met ``tenant``'s TTFT and TPOT targets (False if unfinished)."""
    if math.isnan(request.completion_s):
        return False
    return (request.first_token_s - request.arrival_s <= tenant.ttft_slo_s
            and request.tpot_s <= tenant.tbt_slo_s)


def meets_slo_table(*, arrival_s: np.ndarray, first_token_s: np.ndarray, completion_s: np.ndarray,
                    output_tokens: np.ndarray, tbt_sum_s: np.ndarray,
                    ttft_slo_s: np.ndarray, tbt_slo_s: np.ndarray) -> np.ndarray:
    """:func:`meets_slo` over a per-request table; SLO arrays are per request (tenant-indexed)."""
    done = ~np.isnan(completion_s)
    tpot = request_tpot_s(output_tokens, tbt_sum_s)
    with np.errstate(invalid="ignore"):
        return done & (first_token_s - arrival_s <= ttft_slo_s) & (tpot <= tbt_slo_s)
