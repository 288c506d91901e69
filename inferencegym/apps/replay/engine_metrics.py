"""The prefix-cache hit rate an engine reports: vLLM's Prometheus counters on ``/metrics``.

vLLM (V1) exports the counters ``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits``
(tokens looked up in / served from the prefix cache, ``_total`` in the text exposition). They are
read before and after a replay; the hit rate of the run is the ratio of the increments. Parsing is
done by ``prometheus_client``'s text parser. A server without them (or without ``/metrics``) gives
None, and the per-response usage field ``prompt_tokens_details.cached_tokens`` is used instead
where the server fills it.
"""

from __future__ import annotations

from typing import Any

QUERIES, HITS = "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"


def metrics_url(endpoint: str) -> str:
    """``http://host:port/v1`` -> ``http://host:port/metrics``."""
    base = endpoint.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + "/metrics"


def read_prefix_counters(url: str, timeout_s: float = 5.0) -> dict[str, float] | None:
    """``{"queries": ..., "hits": ...}`` summed over label sets, or None when not exported."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    try:
        r = httpx.get(url, timeout=timeout_s)
        if r.status_code != 200:
            return None
        totals: dict[str, float] = {}
        for fam in text_string_to_metric_families(r.text):
            for sample in fam.samples:  # "name" or "name_total" (the parser may split them)
                base = sample.name[: -len("_total")] if sample.name.endswith("_total") else sample.name
                if base in (QUERIES, HITS):
                    key = "queries" if base == QUERIES else "hits"
                    totals[key] = totals.get(key, 0.0) + float(sample.value)
    except (httpx.HTTPError, ValueError):
        return None
    return totals if set(totals) == {"queries", "hits"} else None


def hit_rate_delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """Hits and queries of the run and their ratio (None if either reading is missing)."""
    if before is None or after is None:
        return None
    q, h = after["queries"] - before["queries"], after["hits"] - before["hits"]
    return {"queries": q, "hits": h, "hit_rate": (h / q) if q > 0 else None}
