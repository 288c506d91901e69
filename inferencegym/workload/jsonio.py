"""Reading JSON that comes from users (trace lines, fit and spec files) without a traceback.

``json.loads`` recurses once per ``[``/``{``: a line nested a few thousand levels deep raises
``RecursionError`` (not a ``ValueError``) and, deeper, can exhaust the stack. Every JSON the
workload layer reads from a user's file goes through :func:`parse_json_line` / :func:`read_json`,
which refuse nesting deeper than :data:`MAX_JSON_DEPTH` before parsing (a linear scan) and turn
every failure into one ``ValueError`` naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_JSON_DEPTH = 64
"""Deepest nesting of ``[``/``{`` a JSON text may have (a trace row needs 2, a fit ~5; deeper is
refused before parsing, so a hostile file cannot exhaust the parser's recursion)."""


def _nesting_depth(line: str) -> int:
    """Deepest ``[``/``{`` nesting of a JSON text (brackets inside strings are skipped)."""
    depth = deepest = 0
    in_str = escaped = False
    for ch in line:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_json_line(line: str, where: str, expected: str = "one flat object per line") -> Any:
    """``json.loads(line)`` with a one-line ``ValueError`` naming ``where`` on any bad line
    (invalid JSON, nesting deeper than :data:`MAX_JSON_DEPTH`)."""
    if _nesting_depth(line) > MAX_JSON_DEPTH:
        raise ValueError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels (expected {expected})")
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        at = f"line {exc.lineno} column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
        raise ValueError(f"{where}: not valid JSON ({exc.msg} at {at})") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ValueError(f"{where}: JSON nested too deeply (expected {expected})") from None


MAX_JSON_FILE_BYTES = 64 << 20
"""Largest fit or spec JSON file read (64 MiB; the shipped ones are ~10 kB)."""


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """The JSON document in ``path``; one ``ValueError`` naming the file on any problem."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: {p}")
    if p.stat().st_size > MAX_JSON_FILE_BYTES:
        raise ValueError(f"{p}: {p.stat().st_size:,} bytes; a {what} may have at most {MAX_JSON_FILE_BYTES:,}")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p}: not UTF-8 text (byte {exc.start + 1})") from None
    return parse_json_line(text, str(p), expected=f"a {what}")


__all__ = ["parse_json_line", "read_json", "MAX_JSON_DEPTH", "MAX_JSON_FILE_BYTES"]
