"""Loading a workload from any source: CSV traces, prefix-sharing JSONL traces or Parquet pools.

The dispatcher above the format modules (:mod:`.loaders` for CSV, :mod:`.prefix_loaders` for JSONL
with hash chains, :mod:`.pool` for Parquet pools), so none of them imports another's reader.
"""

from __future__ import annotations

from pathlib import Path

from .loaders import JSONL_SUFFIXES, load_csv_trace
from .pool import read_pool
from .prefix_loaders import PREFIX_FORMATS, load_prefix_trace
from .trace import Workload


def _is_prefix_format(path: Path, format: str) -> bool:
    return format in PREFIX_FORMATS or (format == "auto" and path.suffix.lower() in JSONL_SUFFIXES)


def load_trace(path: str | Path, format: str = "auto", *, keep_failed: bool = False,
               sort: bool = False, trace_block_tokens: int | None = None, spread_tick_s: float = 0.0,
               seed: int = 0) -> Workload:
    """Load a CSV trace into a `Workload`, sorted by arrival.

    BurstGPT and Azure times are rebased so the first row of the file is at 0 s; replay-format
    times are simulator seconds and are kept as given.

    Args:
        path: the CSV file.
        format: ``"burstgpt"``, ``"azure"``, ``"replay"``, ``"mooncake"``, ``"bailian"`` (JSONL
            with hash chains, `inferencegym.workload.prefix_loaders`), ``"pool"`` (a Parquet pool
            from `prepare`) or ``"auto"`` (a pool by its .parquet suffix, JSONL by .jsonl, else
            guessed from the CSV header).
        keep_failed: keep failed rows (0 output tokens) as failures instead of dropping them.
        sort: sort rows by time instead of rejecting a file whose timestamps go backwards.
        trace_block_tokens, spread_tick_s, seed: JSONL formats only (tokens per hash id; spread
            each arrival over ``U[0, spread_tick_s)`` with a Generator seeded by ``seed``).
    """
    path = Path(path)
    if _is_prefix_format(path, format):
        return load_prefix_trace(path, format, trace_block_tokens=trace_block_tokens,
                                 spread_tick_s=spread_tick_s, seed=seed, keep_failed=keep_failed, sort=sort)
    if format == "pool" or (format == "auto" and path.suffix.lower() in (".parquet", ".pq")):
        return read_pool(path, drop_failed=not keep_failed)
    return load_csv_trace(path, format, keep_failed=keep_failed, sort=sort)


def load_any(path: str | Path, format: str = "auto", *, keep_failed: bool = False,
             **prefix_options) -> Workload:
    """A trace CSV or JSONL (any format) or a Parquet pool, by file extension. ``prefix_options``
    (``trace_block_tokens``, ``spread_tick_s``, ``seed``) apply to JSONL traces."""
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        return read_pool(path)
    return load_trace(path, format, keep_failed=keep_failed, **prefix_options)
