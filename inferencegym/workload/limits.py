"""Bounds every trace loader applies to what a file may hold (one place, so CSV, JSONL and pools agree).

A value outside them is not a trace of LLM requests but a typo or a hostile file; the loaders reject
the first such row naming the file, row and column instead of letting a later stage overflow.
"""

from __future__ import annotations

MAX_TRACE_TOKENS = 100_000_000
"""Prompt or output tokens of one request at most (100 M: 100x the longest context of any model)."""
MAX_TRACE_TIME_S = 1e10
"""Largest absolute timestamp in seconds (~317 years; Unix-epoch seconds and milliseconds fit)."""
INT64_MAX = 2**63 - 1
"""Largest integer a trace column may hold (the columns are int64)."""

__all__ = ["MAX_TRACE_TOKENS", "MAX_TRACE_TIME_S", "INT64_MAX"]
