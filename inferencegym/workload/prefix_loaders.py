"""Loaders for prefix-sharing traces in JSON Lines: Mooncake FAST'25 and Qwen-Bailian.

=========== ============================================================ ========== ===========
format      fields (found by name, case and spaces ignored)              times      block size
=========== ============================================================ ========== ===========
mooncake    ``timestamp``, ``input_length``, ``output_length``,         ms         512 tokens
            ``hash_ids``
bailian     ``chat_id``, ``parent_chat_id``, ``timestamp``,             s          16 tokens
            ``input_length``, ``output_length``, ``type``, ``turn``,
            ``hash_ids``
=========== ============================================================ ========== ===========

Times are rebased so the first row is at 0 s. ``hash_ids[j]`` identifies block ``j`` of
``trace_block_tokens`` prompt tokens (a parameter; the defaults are the traces' published sizes);
`inferencegym.workload.hashchain` maps them onto the simulator's blocks. Bailian's ``chat_id``,
``parent_chat_id`` and ``turn`` become the int columns ``chat``, ``parent`` (-1 at a conversation's
first turn) and ``turn``, and
``type`` the label ``type``. The file is parsed with ``pyarrow.json`` (typed, fast); when a row does
not parse, a line-by-line scan names the file, line, field and what was expected. Mooncake's real
conversation trace is released on a ~3-second clock: ``spread_tick_s=3`` adds ``U[0, 3)`` s to
every arrival (a seeded numpy Generator), spreading each tick's requests over it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .arrow_np import threads_pay, to_numpy
from .hashchain import check_chain
from .jsonio import parse_json_line
from .limits import INT64_MAX, MAX_TRACE_TIME_S, MAX_TRACE_TOKENS
from .trace import Workload

__all__ = ["PREFIX_FORMATS", "load_prefix_trace", "detect_prefix_format"]


@dataclass(frozen=True)
class _JsonFormat:
    name: str
    time_unit_s: float
    block_tokens: int
    required: tuple[tuple[str, str], ...]
    """(field, kind) with kind in int | num | ids | str."""
    description: str


_COMMON = (("timestamp", "num"), ("input_length", "int"), ("output_length", "int"), ("hash_ids", "ids"))
PREFIX_FORMATS: dict[str, _JsonFormat] = {
    "mooncake": _JsonFormat("mooncake", 1e-3, 512, _COMMON,
                            "Mooncake FAST'25 JSONL (timestamp ms, input_length, output_length, "
                            "hash_ids of 512-token blocks)"),
    "bailian": _JsonFormat("bailian", 1.0, 16,
                           (("chat_id", "int"), ("parent_chat_id", "int"), *_COMMON, ("type", "str"),
                            ("turn", "int")),
                           "Qwen-Bailian JSONL (chat_id, parent_chat_id, timestamp s, input_length, "
                           "output_length, type, turn, hash_ids of 16-token blocks)"),
}
_WANT = {"int": "an integer (|x| <= 2^63-1)", "num": "a finite number",
         "ids": "a list of integer block ids in [0, 2^63-1]",
         "str": "a string"}
_INT_COLUMNS = {"chat_id": "chat", "parent_chat_id": "parent", "turn": "turn"}


def _lines(path: Path):
    """``(line_no, line)`` of a UTF-8 text file; a byte that is not UTF-8 fails naming the line."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                yield line_no, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}: line {line_no}: not UTF-8 text (byte {exc.start + 1}); "
                                 "expected one JSON object per line") from None


def _first_object(path: Path) -> dict:
    for line_no, line in _lines(path):
        if line.strip():
            obj = parse_json_line(line, f"{path}: line {line_no}")
            if not isinstance(obj, dict):
                raise ValueError(f"{path}: line {line_no}: expected a JSON object, got {line.strip()[:60]!r}")
            return obj
    raise ValueError(f"{path}: the file is empty (expected one JSON object per line)")


def detect_prefix_format(path: str | Path) -> str:
    """``bailian`` when the first object has ``chat_id``, else ``mooncake`` when it has ``hash_ids``."""
    keys = {k.strip().lower() for k in _first_object(Path(path))}
    if "chat_id" in keys:
        return "bailian"
    if "hash_ids" in keys:
        return "mooncake"
    raise ValueError(f"{path}: cannot tell the JSONL trace format from its fields {sorted(keys)}; valid: "
                     + "; ".join(f"{k}: {v.description}" for k, v in PREFIX_FORMATS.items()))


def _is_int64(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= INT64_MAX


def _check_value(kind: str, v) -> bool:
    if kind == "int":
        return _is_int64(v)
    if kind == "num":  # an int past float's range is not a finite number either
        return isinstance(v, (int, float)) and not isinstance(v, bool) and \
            (isinstance(v, float) and math.isfinite(v) or isinstance(v, int) and abs(v) <= INT64_MAX)
    if kind == "str":
        return isinstance(v, str)
    return isinstance(v, list) and all(_is_int64(x) and x >= 0 for x in v)


def _diagnose(path: Path, fmt: _JsonFormat, keys: dict[str, str]) -> str:
    """Slow exact scan: the first line/field that is not what the format expects."""
    row = 0
    for line_no, line in _lines(path):
        if not line.strip():
            continue
        row += 1
        where = f"row {row} (line {line_no})"
        try:
            obj = parse_json_line(line, where)
        except ValueError as exc:
            return str(exc)
        if not isinstance(obj, dict):
            return f"{where}: expected a JSON object, got {line.strip()[:60]!r}"
        for name, kind in fmt.required:
            key = keys[name]
            if key not in obj or obj[key] is None:
                return f"{where}, field '{key}': missing value (expected {_WANT[kind]})"
            if not _check_value(kind, obj[key]):
                return f"{where}, field '{key}': expected {_WANT[kind]}, got {json.dumps(obj[key])[:80]}"
    return "could not be read (no single bad row found)"


def _line_of_row(path: Path, row: int) -> int:
    seen = 0
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                seen += 1
                if seen == row:
                    return line_no
    return row


def load_prefix_trace(path: str | Path, format: str = "auto", *, trace_block_tokens: int | None = None,
                      spread_tick_s: float = 0.0, seed: int = 0, keep_failed: bool = False,
                      sort: bool = False) -> Workload:
    """Load a Mooncake or Bailian JSONL trace (hash chains included) as a `Workload`.

    Args:
        format: ``"mooncake"``, ``"bailian"`` or ``"auto"`` (from the first object's fields).
        trace_block_tokens: tokens per hash id (default: 512 Mooncake, 16 Bailian).
        spread_tick_s: > 0 adds ``U[0, spread_tick_s)`` s to each arrival (seeded by ``seed``).
        keep_failed: keep rows with 0 output tokens (dropped by default, as for the CSV traces).
        sort: sort by time instead of rejecting a file whose timestamps go backwards.
    """
    import pyarrow as pa
    import pyarrow.json as pj

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"trace file not found: {path}")
    if format == "auto":
        format = detect_prefix_format(path)
    if format not in PREFIX_FORMATS:
        raise ValueError(f"unknown JSONL trace format '{format}'; valid: {', '.join(PREFIX_FORMATS)}")
    fmt = PREFIX_FORMATS[format]
    block = fmt.block_tokens if trace_block_tokens is None else int(trace_block_tokens)
    if block < 1:
        raise ValueError(f"trace_block_tokens must be >= 1, got {block}")
    if not (spread_tick_s >= 0 and math.isfinite(spread_tick_s)):
        raise ValueError(f"spread_tick_s must be a finite number >= 0, got {spread_tick_s}")
    first = _first_object(path)
    by_norm = {k.strip().lower(): k for k in first}
    missing = [n for n, _ in fmt.required if n not in by_norm]
    if missing:
        raise ValueError(f"{path}: row 1: missing field(s) {missing} for format '{format}' ({fmt.description}); "
                         f"the first object has fields {sorted(first)}")
    keys = {n: by_norm[n] for n, _ in fmt.required}
    types = {"int": pa.int64(), "num": pa.float64(), "ids": pa.list_(pa.int64()), "str": pa.string()}
    schema = pa.schema([(keys[n], types[k]) for n, k in fmt.required])
    try:
        ro = pj.ReadOptions()
        table = pj.read_json(str(path), read_options=pj.ReadOptions(
            use_threads=threads_pay(path, ro.block_size), block_size=ro.block_size),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    except pa.ArrowInvalid:
        raise ValueError(f"{path}: {_diagnose(path, fmt, keys)}") from None

    def fail(row0: int, name: str, msg: str):
        r = row0 + 1
        raise ValueError(f"{path}: row {r} (line {_line_of_row(path, r)}), field '{keys[name]}': {msg}")

    cols = {}
    for name, kind in fmt.required:
        col = table.column(keys[name]).combine_chunks()
        if col.null_count:
            fail(int(np.flatnonzero(np.asarray(col.is_null()))[0]), name, f"missing value (expected {_WANT[kind]})")
        cols[name] = col
    t = to_numpy(cols["timestamp"]) * fmt.time_unit_s
    if not np.all(np.isfinite(t)):
        fail(int(np.flatnonzero(~np.isfinite(t))[0]), "timestamp", "expected a finite number")
    if t.size and np.abs(t).max() > MAX_TRACE_TIME_S:
        k = int(np.argmax(np.abs(t)))
        fail(k, "timestamp", f"expected |t| <= {MAX_TRACE_TIME_S:g} s after the format's unit, "
                             f"got {t[k]:g} s")
    prompt = to_numpy(cols["input_length"])
    output = to_numpy(cols["output_length"])
    for name, arr in (("input_length", prompt), ("output_length", output)):
        if arr.size and arr.min() < 0:
            k = int(np.argmin(arr))
            fail(k, name, f"expected a token count >= 0, got {int(arr[k])}")
        if arr.size and arr.max() > MAX_TRACE_TOKENS:
            k = int(np.argmax(arr))
            fail(k, name, f"expected a token count <= {MAX_TRACE_TOKENS:,}, got {int(arr[k])}")
    if not sort and t.size > 1 and np.any(np.diff(t) < 0):
        fail(int(np.flatnonzero(np.diff(t) < 0)[0]) + 1, "timestamp",
             "timestamps must be non-decreasing (this row is earlier than the one before); "
             "sort the file first (sort=True or --sort)")
    ids = cols["hash_ids"]
    offsets = to_numpy(ids.offsets)
    flat = to_numpy(ids.flatten())
    counts = np.diff(offsets)
    too_many = counts > -(-prompt // block)
    negative = np.zeros(len(t), bool)
    if flat.size and flat.min() < 0:
        negative[np.searchsorted(offsets, np.flatnonzero(flat < 0), side="right") - 1] = True
    bad = np.flatnonzero(too_many | negative)
    if bad.size:
        k = int(bad[0])
        r = k + 1
        check_chain(flat[offsets[k]:offsets[k + 1]], int(prompt[k]), block,
                    f"{path}: row {r} (line {_line_of_row(path, r)}), field '{keys['hash_ids']}'")
    chains = np.empty(len(t), dtype=object)
    for i in range(len(t)):
        chains[i] = flat[offsets[i]:offsets[i + 1]]
    ints = {new: to_numpy(cols[old]) for old, new in _INT_COLUMNS.items() if old in cols}
    labels = {"type": np.asarray(cols["type"].to_pylist(), dtype=object)} if "type" in cols else None
    keep = np.ones(len(t), bool) if keep_failed else output > 0
    t = t - (t.min() if t.size else 0.0)
    if spread_tick_s > 0:
        t = t + np.random.default_rng(seed).uniform(0.0, spread_tick_s, size=t.size)
    return Workload.from_arrays(
        t[keep], prompt[keep], output[keep], labels=None if labels is None else {"type": labels["type"][keep]},
        source=f"{path.name} ({format})", sort=sort or spread_tick_s > 0, hash_ids=chains[keep],
        hash_block_tokens=block, ints={k: v[keep] for k, v in ints.items()})
