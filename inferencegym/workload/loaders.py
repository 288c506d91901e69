"""Trace loaders: BurstGPT, Azure LLM inference 2023, and the simulator's replay CSV.

Columns are found by name (case and surrounding spaces ignored), never by position, so every
BurstGPT release (v1/v2: ``Timestamp, Model, Request tokens, Response tokens, Total tokens,
Log Type``; v3 inserts ``Session ID`` and ``Elapsed time``) loads through one code path.
Reading is streamed with ``pyarrow.csv.open_csv`` in blocks, so a file of tens of millions of rows
is never held as Python objects. A malformed file raises `TraceFormatError` naming the file, the
data row (1-based; the file line is row + 1) and the column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator

import numpy as np

from .arrow_np import threads_pay, to_numpy
from .limits import INT64_MAX, MAX_TRACE_TIME_S, MAX_TRACE_TOKENS
from .prefix_loaders import detect_prefix_format
from .trace import Workload

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
"""File suffixes read as JSONL traces (prefix-sharing formats)."""

__all__ = ["TraceFormatError", "FORMATS", "load_trace", "iter_trace_batches", "detect_format",
           "TraceBatch", "load_any"]


class TraceFormatError(ValueError):
    """A trace file that cannot be read as the requested format (message names file/row/column)."""


@dataclass(frozen=True)
class _Format:
    name: str
    time_col: str
    prompt_col: str
    output_col: str
    time_kind: str  # "seconds" or "datetime"
    optional: tuple[tuple[str, str, str], ...] = ()  # (canonical name, file column, kind "int"|"str")
    description: str = ""
    rebase: bool = True  # arrival_s from the first row; False = times are already simulator seconds


FORMATS: dict[str, _Format] = {
    "burstgpt": _Format("burstgpt", "Timestamp", "Request tokens", "Response tokens", "seconds",
                        (("model", "Model", "str"), ("log_type", "Log Type", "str")),
                        "BurstGPT CSV, any release (Timestamp, Model, Request tokens, Response tokens, "
                        "Total tokens, Log Type [, Session ID, Elapsed time])"),
    "azure": _Format("azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime", (),
                     "Azure LLM inference trace 2023 (TIMESTAMP, ContextTokens, GeneratedTokens)"),
    "replay": _Format("replay", "arrived_at", "num_prefill_tokens", "num_decode_tokens", "seconds",
                      (("tenant", "tenant", "int"), ("priority", "priority", "int")),
                      "the simulator's replay CSV (arrived_at, num_prefill_tokens, num_decode_tokens "
                      "[, tenant, priority]); times are kept as given (simulator seconds, >= 0)",
                      rebase=False),
}


def _norm(name: str) -> str:
    return name.strip().lower()


def _valid_formats() -> str:
    return ", ".join(sorted(FORMATS))


def _read_header(path: Path) -> list[str]:
    if not path.exists():
        raise FileNotFoundError(f"trace file not found: {path}")
    if path.stat().st_size == 0:
        raise TraceFormatError(f"{path}: the file is empty (expected a CSV header line and data rows)")
    with open(path, newline="", encoding="utf-8-sig") as f:
        try:
            header = next(csv.reader(f))
        except StopIteration:
            header = []
        except (csv.Error, UnicodeDecodeError) as exc:
            raise TraceFormatError(f"{path}: row 0 (header): not a readable CSV header ({exc})") from None
    if not header or all(not h.strip() for h in header):
        raise TraceFormatError(f"{path}: the file is empty (expected a CSV header line and data rows)")
    return header


def detect_format(path: str | Path) -> str:
    """Guess the format of a CSV trace from its header names."""
    path = Path(path)
    if path.suffix.lower() in JSONL_SUFFIXES:
        return detect_prefix_format(path)
    have = {_norm(h) for h in _read_header(path)}
    for name, fmt in FORMATS.items():
        if {_norm(fmt.time_col), _norm(fmt.prompt_col), _norm(fmt.output_col)} <= have:
            return name
    raise TraceFormatError(
        f"{path}: cannot tell the trace format from its columns {sorted(have)}; valid formats: "
        + "; ".join(f"{k}: {v.description}" for k, v in FORMATS.items()))


def _resolve_columns(path: Path, fmt: _Format) -> dict[str, str]:
    """Map canonical names -> actual header names; raise naming what is missing."""
    header = _read_header(path)
    by_norm: dict[str, str] = {}
    for h in header:
        by_norm.setdefault(_norm(h), h)
    cols: dict[str, str] = {}
    missing = []
    for canon, col in (("time", fmt.time_col), ("prompt", fmt.prompt_col), ("output", fmt.output_col)):
        if _norm(col) in by_norm:
            cols[canon] = by_norm[_norm(col)]
        else:
            missing.append(col)
    if missing:
        raise TraceFormatError(
            f"{path}: missing column(s) {missing} for format '{fmt.name}' ({fmt.description}); "
            f"the file has columns {header}. Pick the right --format (valid: {_valid_formats()}) "
            "or rename the columns.")
    for canon, col, _kind in fmt.optional:
        if _norm(col) in by_norm:
            cols[canon] = by_norm[_norm(col)]
    return cols


@dataclass
class TraceBatch:
    """One validated block of a trace (numpy columns; times still raw)."""

    first_row: int
    """1-based data-row number of the first row of this block in the file."""
    time: np.ndarray
    """Raw times: float64 seconds, or int64 ns since epoch for datetime formats."""
    prompt: np.ndarray
    output: np.ndarray
    extra: dict
    """Optional columns: ``model``/``log_type`` (pyarrow string arrays), ``tenant``/``priority`` (int64)."""
    bytes_read: int
    rows_in_file: int
    """Rows of the file this block covered (including dropped failures)."""
    time_min_raw: float | int
    """Smallest raw time in the block before failures were dropped (the trace start counts them)."""


def _parse_cell(kind: str, value: str):
    value = value.strip()
    if kind == "seconds":
        x = float(value)
        if not math.isfinite(x):
            raise ValueError("not a finite number")
        return x
    if kind == "datetime":
        return datetime.fromisoformat(value)
    if kind == "int":
        if value == "":
            raise ValueError("empty")
        x = int(value)  # digits only, as the columns are read (no 1e3, no 10.0)
        if abs(x) > INT64_MAX:
            raise ValueError("out of the int64 range")
        return x
    return value


def _diagnose(path: Path, fmt: _Format, cols: dict[str, str], start_row: int) -> str | None:
    """Slow exact scan from ``start_row`` to find the first cell that does not parse."""
    kinds = {"time": fmt.time_kind, "prompt": "int", "output": "int"}
    for canon, _col, kind in fmt.optional:
        if canon in cols and kind == "int":
            kinds[canon] = "int"
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader)
        index = {c: header.index(cols[c]) for c in kinds}
        for row_no, row in enumerate(reader, start=1):
            if row_no < start_row:
                continue
            for canon, kind in kinds.items():
                i = index[canon]
                if i >= len(row):
                    return (f"row {row_no} (line {row_no + 1}), column '{cols[canon]}': the row has only "
                            f"{len(row)} fields, expected at least {i + 1}")
                try:
                    _parse_cell(kind, row[i])
                except ValueError:
                    want = {"seconds": "a number of seconds", "datetime":
                            "a date-time like 2023-11-16 18:17:03.9799600",
                            "int": f"an integer (digits, |x| <= {INT64_MAX})"}[kind]
                    return (f"row {row_no} (line {row_no + 1}), column '{cols[canon]}': "
                            f"expected {want}, got {row[i]!r}")
    return None


def iter_trace_batches(path: str | Path, format: str, *, keep_failed: bool = False,
                       block_size: int = 8 << 20, check_order: bool = True) -> Iterator[TraceBatch]:
    """Stream a trace file as validated `TraceBatch` blocks (used by `load_trace` and `prepare`).

    Validation per block: parseable values, no missing cells, tokens >= 0, times non-decreasing
    (also across blocks, unless ``check_order=False``). Failed rows (0 output tokens) are
    dropped unless ``keep_failed``.
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv

    path = Path(path)
    if format not in FORMATS:
        raise ValueError(f"unknown trace format '{format}'; valid: {_valid_formats()}")
    fmt = FORMATS[format]
    cols = _resolve_columns(path, fmt)
    types = {cols["time"]: pa.timestamp("ns") if fmt.time_kind == "datetime" else pa.float64(),
             cols["prompt"]: pa.int64(), cols["output"]: pa.int64()}
    for canon, _col, kind in fmt.optional:
        if canon in cols:
            types[cols[canon]] = pa.int64() if kind == "int" else pa.string()
    read_opts = pcsv.ReadOptions(block_size=block_size, encoding="utf8",
                                 use_threads=threads_pay(path, block_size))
    conv = pcsv.ConvertOptions(include_columns=list(types), column_types=types,
                               strings_can_be_null=False, quoted_strings_can_be_null=False)
    with pa.OSFile(str(path)) as source:
        yield from _iter_blocks(path, format, fmt, cols, source, read_opts, conv, keep_failed, check_order)


def _iter_blocks(path, format, fmt, cols, source, read_opts, conv, keep_failed, check_order):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    row = 1
    last_time = None

    def fail(message: str):
        raise TraceFormatError(f"{path}: {message}")

    def convert_error(exc: Exception):
        msg = _diagnose(path, fmt, cols, row)
        if msg is None:
            fail(f"could not read the file as format '{format}' near row {row}: {exc}")
        fail(msg)

    try:
        reader = pcsv.open_csv(source, read_options=read_opts, convert_options=conv)
    except pa.ArrowInvalid as exc:
        if "Empty CSV file" in str(exc):
            fail("the file is empty (expected a CSV header line and data rows)")
        convert_error(exc)
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as exc:
            convert_error(exc)
        n = batch.num_rows
        if n == 0:
            continue
        arrays = {}
        for canon in cols:
            col = batch.column(cols[canon])
            if col.null_count:
                bad = int(np.flatnonzero(np.asarray(col.is_null()))[0])
                fail(f"row {row + bad} (line {row + bad + 1}), column '{cols[canon]}': empty or NaN value (expected a number)")
            arrays[canon] = col
        if fmt.time_kind == "datetime":
            t = to_numpy(arrays["time"].cast(pa.int64()))
        else:
            t = to_numpy(arrays["time"])
            if not np.all(np.isfinite(t)):
                bad = int(np.flatnonzero(~np.isfinite(t))[0])
                fail(f"row {row + bad} (line {row + bad + 1}), column '{cols['time']}': "
                     f"expected a finite number of seconds, got {t[bad]}")
            if t.size and np.abs(t).max() > MAX_TRACE_TIME_S:
                bad = int(np.argmax(np.abs(t)))
                fail(f"row {row + bad} (line {row + bad + 1}), column '{cols['time']}': "
                     f"expected seconds with |t| <= {MAX_TRACE_TIME_S:g}, got {t[bad]:g}")
            if not fmt.rebase and t.size and t.min() < 0:
                bad = int(np.argmin(t))
                fail(f"row {row + bad} (line {row + bad + 1}), column '{cols['time']}': "
                     f"simulator times must be >= 0, got {t[bad]}")
        prompt = to_numpy(arrays["prompt"])
        output = to_numpy(arrays["output"])
        for canon, arr in (("prompt", prompt), ("output", output)):
            if arr.size and arr.min() < 0:
                bad = int(np.argmin(arr))
                fail(f"row {row + bad} (line {row + bad + 1}), column '{cols[canon]}': token counts "
                     f"must be >= 0, got {int(arr[bad])}")
            if arr.size and arr.max() > MAX_TRACE_TOKENS:
                bad = int(np.argmax(arr))
                fail(f"row {row + bad} (line {row + bad + 1}), column '{cols[canon]}': token counts "
                     f"must be <= {MAX_TRACE_TOKENS:,}, got {int(arr[bad])}")
        d = np.diff(t) if check_order else np.zeros(0)
        if d.size and d.min() < 0:
            bad = int(np.flatnonzero(d < 0)[0]) + 1
            fail(f"row {row + bad} (line {row + bad + 1}), column '{cols['time']}': timestamps must be "
                 f"non-decreasing (this row is earlier than the one before); sort the file by "
                 f"'{cols['time']}' first (load_trace(..., sort=True) or --sort)")
        if check_order and last_time is not None and t[0] < last_time:
            fail(f"row {row} (line {row + 1}), column '{cols['time']}': timestamps must be "
                 "non-decreasing (this row is earlier than the one before); sort the file first "
                 "(load_trace(..., sort=True) or --sort)")
        last_time = t[-1]
        extra = {}
        for canon, _col, kind in fmt.optional:
            if canon in arrays:
                if kind == "int":
                    v = to_numpy(arrays[canon])
                    if v.size and v.min() < 0:
                        bad = int(np.argmin(v))
                        fail(f"row {row + bad} (line {row + bad + 1}), column '{cols[canon]}': "
                             f"must be >= 0, got {int(v[bad])}")
                    extra[canon] = v
                else:
                    extra[canon] = arrays[canon]  # kept as an Arrow string array (cheap to write)
        first = row
        row += n
        tmin = t.min() if fmt.rebase else type(t[0])(0)
        if not keep_failed:
            ok = output > 0
            if not ok.all():
                t, prompt, output = t[ok], prompt[ok], output[ok]
                mask = pa.array(ok)
                extra = {k: (v.filter(mask) if isinstance(v, pa.Array) else v[ok]) for k, v in extra.items()}
        yield TraceBatch(first, t, prompt, output, extra, int(source.tell()), n, tmin)
    if row == 1:
        fail("no data rows (the file has a header only)")


def _batches_to_workload(batches, path: Path, format: str, sort: bool) -> Workload:
    ts, ps, os_, extras, t0 = [], [], [], {}, None
    for b in batches:
        t0 = b.time_min_raw if t0 is None else min(t0, b.time_min_raw)
        ts.append(b.time)
        ps.append(b.prompt)
        os_.append(b.output)
        for k, v in b.extra.items():
            extras.setdefault(k, []).append(v)
    if not ts:
        return Workload.empty(source=str(path))
    t = np.concatenate(ts)
    if t.dtype == np.int64:  # ns since epoch
        arrival = (t - t0).astype(np.float64) / 1e9
    else:
        arrival = t - t0
    import pyarrow as pa

    extra, labels = {}, {}
    for k, v in extras.items():
        if k in ("model", "log_type"):
            enc = pa.chunked_array(v).combine_chunks().dictionary_encode()
            labels[k] = (np.asarray(to_numpy(enc.indices), np.int32),
                         tuple(str(x) for x in enc.dictionary.to_pylist()))
        else:
            extra[k] = np.concatenate(v)
    return Workload.from_arrays(arrival, np.concatenate(ps), np.concatenate(os_),
                                extra.get("tenant"), extra.get("priority"), labels=labels,
                                source=f"{Path(path).name} ({format})", sort=sort)


def load_csv_trace(path: str | Path, format: str = "auto", *, keep_failed: bool = False,
                   sort: bool = False) -> Workload:
    """Load a CSV trace (``burstgpt``, ``azure``, ``replay`` or ``auto`` by header) into a `Workload`.

    BurstGPT and Azure times are rebased so the first row of the file is at 0 s; replay-format
    times are simulator seconds and are kept as given. ``sort`` sorts rows by time instead of
    rejecting a file whose timestamps go backwards. Any source (JSONL, pools): `sources.load_trace`.
    """
    path = Path(path)
    if format == "auto":
        format = detect_format(path)
    if not sort:
        return _batches_to_workload(iter_trace_batches(path, format, keep_failed=keep_failed),
                                    path, format, sort=False)
    # sorting: read every block without the order check, then sort
    return _batches_to_workload(iter_trace_batches(path, format, keep_failed=keep_failed,
                                                   check_order=False), path, format, sort=True)
