"""Parquet request pools: `prepare` (stream a CSV trace into a typed Parquet file), `write_pool`,
`read_pool` (with windowing and time scaling) and `pool_metadata`.

Pool schema (scripts outside the project can read it with any Parquet reader):

=============== ========== ==================================================================
column          type       meaning
=============== ========== ==================================================================
arrival_s       float64    seconds from the first row of the trace (failed rows included)
prompt_tokens   int64      prompt length
output_tokens   int64      output length (0 = a failed request, kept only with keep_failed)
model           string     model name (BurstGPT ``Model``), null if the trace has none
log_type        string     BurstGPT ``Log Type``, null if the trace has none
tenant          int64      tenant index (0 unless the trace says otherwise)
priority        int64      0 best effort, 1 priority
hash_ids        list<int64> prefix-sharing traces only: the request's prefix-block hash ids
                           (``hash_block_tokens`` tokens per id, in the metadata)
session, turn,  int64      conversation traces only (Bailian ``chat_id`` -> chat, ``turn``,
parent, chat               ``parent_chat_id`` -> parent; generated ``session``, ``turn``)
=============== ========== ==================================================================

Pools written before hash chains existed have no ``hash_ids`` column and read as before.

File metadata key ``inferencegym.pool`` holds JSON: ``{"schema", "source": {file, format,
size_bytes, rows_in_file, rows_written, failed_dropped}, "stats": trace_stats(...)}``. Files are
written to a temporary name in the output folder and renamed at the end, so an error never
leaves a half-written pool.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from .limits import MAX_TRACE_TIME_S, MAX_TRACE_TOKENS
from .loaders import FORMATS, detect_format, iter_trace_batches, load_csv_trace
from .prefix_loaders import PREFIX_FORMATS, load_prefix_trace
from .trace import Workload

__all__ = ["prepare", "write_pool", "read_pool", "pool_metadata", "POOL_SCHEMA_VERSION", "META_KEY"]

POOL_SCHEMA_VERSION = "inferencegym.pool/1"
META_KEY = b"inferencegym.pool"


_INT_COLUMNS = ("session", "turn", "parent", "chat")


def _schema(hashes: bool = False, ints: tuple[str, ...] = ()):
    import pyarrow as pa

    fields = [("arrival_s", pa.float64()), ("prompt_tokens", pa.int64()),
              ("output_tokens", pa.int64()), ("model", pa.string()), ("log_type", pa.string()),
              ("tenant", pa.int64()), ("priority", pa.int64())]
    if hashes:
        fields.append(("hash_ids", pa.list_(pa.int64())))
    fields += [(k, pa.int64()) for k in ints]
    return pa.schema(fields)


def _hash_list_array(chains):
    """An Arrow list<int64> array from an object array of int64 arrays (no per-id Python objects)."""
    import pyarrow as pa

    lengths = np.fromiter((len(c) for c in chains), np.int64, count=len(chains))
    offsets = np.zeros(len(chains) + 1, np.int32 if lengths.sum() < 2**31 else np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(list(chains)) if len(chains) else np.zeros(0, np.int64)
    cls = pa.ListArray if offsets.dtype == np.int32 else pa.LargeListArray
    arr = cls.from_arrays(pa.array(offsets), pa.array(flat.astype(np.int64)))
    return arr if cls is pa.ListArray else arr.cast(pa.list_(pa.int64()))


def _strings(x, n):
    import pyarrow as pa

    if x is None:
        return pa.nulls(n, pa.string())
    return x if isinstance(x, pa.Array) else pa.array(x, pa.string())


def _table(arrival, prompt, output, model, log_type, tenant, priority):
    import pyarrow as pa

    n = len(arrival)
    return pa.Table.from_arrays([
        pa.array(arrival, pa.float64()), pa.array(prompt, pa.int64()), pa.array(output, pa.int64()),
        _strings(model, n), _strings(log_type, n),
        pa.array(tenant, pa.int64()) if tenant is not None else pa.array(np.zeros(n, np.int64)),
        pa.array(priority, pa.int64()) if priority is not None else pa.array(np.zeros(n, np.int64)),
    ], schema=_schema())


def _trace_stats(w: Workload) -> dict:
    from .stats import trace_stats  # (imported when a pool is written, not when one is read)

    return trace_stats(w)


class _AtomicParquet:
    """A ParquetWriter on a temporary file, renamed onto ``path`` by `commit`."""

    def __init__(self, path: Path, schema=None):
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        os.close(fd)
        self.tmp = Path(tmp)
        self.writer = pq.ParquetWriter(str(self.tmp), schema if schema is not None else _schema(),
                                       compression="zstd")

    def write(self, table) -> None:
        self.writer.write_table(table, row_group_size=1 << 20)

    def commit(self, meta: dict) -> None:
        self.writer.add_key_value_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
        self.writer.close()
        from .fit import _umask  # (the generators' module: imported when a pool is written)

        os.chmod(self.tmp, 0o666 & ~_umask())
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def write_pool(w: Workload, path: str | Path, *, source: dict | None = None) -> Path:
    """Write a workload as a Parquet pool (atomically), statistics in the metadata."""

    import pyarrow as pa

    path = Path(path)
    ints = tuple(k for k in _INT_COLUMNS if k in w.ints)
    schema = _schema(w.hash_ids is not None, ints)
    out = _AtomicParquet(path, schema)
    try:
        table = _table(w.arrival_s, w.prompt_tokens, w.output_tokens,
                       w.label("model") if "model" in w.labels else None,
                       w.label("log_type") if "log_type" in w.labels else None, w.tenant, w.priority)
        if w.hash_ids is not None:
            table = table.append_column("hash_ids", _hash_list_array(w.hash_ids))
        for k in ints:
            table = table.append_column(k, pa.array(w.ints[k], pa.int64()))
        meta = {"schema": POOL_SCHEMA_VERSION, "source": source or {"description": w.source},
                "stats": _json_safe(_trace_stats(w))}
        if w.hash_ids is not None:
            meta["hash_block_tokens"] = w.hash_block_tokens
        out.write(table.cast(schema))
        out.commit(meta)
    except BaseException:
        out.abort()
        raise
    return path


def prepare(input_path: str | Path, output_path: str | Path, format: str = "auto", *,
            keep_failed: bool = False, sort: bool = False, block_size: int = 8 << 20,
            on_progress: Callable[[int, int], None] | None = None,
            prefix_options: dict | None = None) -> dict:
    """Stream a CSV trace into a Parquet pool; returns the metadata written.

    Memory: one CSV block at a time plus three numeric columns kept for the statistics
    (~24 bytes per request). ``on_progress(bytes_read, total_bytes)`` is called after each block.
    ``sort=True`` accepts a file whose timestamps go backwards by loading it whole and sorting
    (not streamed). JSONL traces (``mooncake``, ``bailian``) are parsed whole and keep their hash
    chains; ``prefix_options`` (``trace_block_tokens``, ``spread_tick_s``, ``seed``) go to their loader.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    if format == "auto":
        format = detect_format(input_path)
    if format in PREFIX_FORMATS:  # JSONL with hash chains: parsed whole by pyarrow.json, then written
        if input_path.resolve() == output_path.resolve():
            raise ValueError(f"prepare: output {output_path} would overwrite the input")
        w_all = load_prefix_trace(input_path, format, keep_failed=True, sort=sort, **(prefix_options or {}))
        w = w_all if keep_failed else w_all.drop_failed()
        write_pool(w, output_path, source={"file": input_path.name, "format": format,
                                           "size_bytes": input_path.stat().st_size,
                                           "rows_in_file": len(w_all), "rows_written": len(w),
                                           "failed_dropped": len(w_all) - len(w), "keep_failed": keep_failed,
                                           **(prefix_options or {})})
        if on_progress is not None:
            on_progress(input_path.stat().st_size, input_path.stat().st_size)
        return pool_metadata(output_path)
    if format not in FORMATS:
        raise ValueError(f"unknown trace format '{format}'; valid: {', '.join(sorted(FORMATS))}")
    if input_path.resolve() == output_path.resolve():
        raise ValueError(f"prepare: output {output_path} would overwrite the input")
    total = input_path.stat().st_size if input_path.exists() else 0
    if sort:
        w = load_csv_trace(input_path, format, keep_failed=keep_failed, sort=True)
        rows_in_file = sum(b.rows_in_file for b in iter_trace_batches(
            input_path, format, keep_failed=True, check_order=False, block_size=block_size))
        src = {"file": input_path.name, "format": format, "size_bytes": total,
               "rows_in_file": rows_in_file, "rows_written": len(w),
               "failed_dropped": 0 if keep_failed else rows_in_file - len(w), "keep_failed": keep_failed,
               "sorted": True}
        write_pool(w, output_path, source=src)
        if on_progress is not None:
            on_progress(total, total)
        return pool_metadata(output_path)
    arrivals, prompts, outputs = [], [], []
    rows_in_file = 0
    t0 = None
    out = None
    try:
        for b in iter_trace_batches(input_path, format, keep_failed=keep_failed, block_size=block_size):
            if out is None:
                out = _AtomicParquet(output_path)
            if t0 is None:
                t0 = b.time_min_raw
            rows_in_file += b.rows_in_file
            if b.time.dtype == np.int64:
                a = (b.time - t0).astype(np.float64) / 1e9
            else:
                a = b.time - t0
            out.write(_table(a, b.prompt, b.output, b.extra.get("model"), b.extra.get("log_type"),
                             b.extra.get("tenant"), b.extra.get("priority")))
            arrivals.append(a)
            prompts.append(b.prompt.astype(np.int64, copy=False))
            outputs.append(b.output.astype(np.int64, copy=False))
            if on_progress is not None:
                on_progress(b.bytes_read, total)
        if out is None:  # header only: iter_trace_batches raised already, keep mypy happy
            raise ValueError(f"{input_path}: no data rows")
        a = np.concatenate(arrivals)
        del arrivals
        n = a.size
        zeros = np.broadcast_to(np.int64(0), (n,))
        w = Workload._wrap(a, np.concatenate(prompts), np.concatenate(outputs), zeros, zeros, {},
                           f"{input_path.name} ({format})")
        del prompts, outputs
        meta = {"schema": POOL_SCHEMA_VERSION,
                "source": {"file": input_path.name, "format": format, "size_bytes": total,
                           "rows_in_file": rows_in_file, "rows_written": n,
                           "failed_dropped": 0 if keep_failed else rows_in_file - n,
                           "keep_failed": keep_failed},
                "stats": _json_safe(_trace_stats(w))}
        out.commit(meta)
        return meta
    except BaseException:
        if out is not None:
            out.abort()
        raise


def _meta_block_tokens(path: Path) -> int:
    try:
        return int(pool_metadata(path).get("hash_block_tokens") or 0)
    except ValueError:
        return 0


def pool_metadata(path: str | Path) -> dict:
    """The ``inferencegym.pool`` metadata of a pool file."""
    import pyarrow.parquet as pq

    md = pq.read_metadata(str(path)).metadata or {}
    if META_KEY not in md:
        raise ValueError(f"{path}: not an InferenceGym pool (no '{META_KEY.decode()}' metadata); "
                         "make one with `inferencegym data prepare`")
    return json.loads(md[META_KEY])


def _check_columns(path: Path, t) -> None:
    """The first value of a pool (any Parquet file) that no trace may hold, named by row and column:
    a missing value, a non-number, NaN/inf or |t| > MAX_TRACE_TIME_S, a negative or > MAX_TRACE_TOKENS
    token count."""
    import pyarrow as pa

    for name in ("arrival_s", "prompt_tokens", "output_tokens", "tenant", "priority"):
        if name not in t.column_names:
            continue
        col = t.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise ValueError(f"{path}: column '{name}' holds {col.type}, expected numbers")
        if col.null_count:
            bad = int(np.flatnonzero(np.asarray(col.is_null()))[0])
            raise ValueError(f"{path}: row {bad + 1}, column '{name}': missing value")
        x = col.to_numpy().astype(np.float64)
        if name == "arrival_s":
            wrong = ~np.isfinite(x) | (np.abs(x) > MAX_TRACE_TIME_S)
            want = f"a finite time with |t| <= {MAX_TRACE_TIME_S:g} s"
        elif name in ("prompt_tokens", "output_tokens"):
            wrong = (x < 0) | (x > MAX_TRACE_TOKENS) | (x != np.floor(x))
            want = f"a whole token count in [0, {MAX_TRACE_TOKENS:,}]"
        else:
            wrong = (x < 0) | (x != np.floor(x))
            want = "a whole number >= 0"
        if wrong.any():
            bad = int(np.flatnonzero(wrong)[0])
            raise ValueError(f"{path}: row {bad + 1}, column '{name}': expected {want}, got {x[bad]:g}")


def read_pool(path: str | Path, *, start_s: float | None = None, duration_s: float | None = None,
              time_scale: float = 1.0, drop_failed: bool = False,
              hash_block_tokens: int | None = None) -> Workload:
    """Load a pool (or any Parquet file with at least ``arrival_s, prompt_tokens,
    output_tokens``) as a `Workload`. A ``hash_ids`` column (list of int64) becomes the workload's
    hash chains, with ``hash_block_tokens`` from the pool metadata (or the argument, which wins).

    ``start_s``/``duration_s`` select a window of trace time (read with a Parquet filter, so
    only the needed row groups are decoded) and rebase it to 0; ``time_scale`` then multiplies
    the times (0.5 = twice the load).
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"pool file not found: {path}")
    try:
        names = set(pq.read_schema(str(path)).names)
    except Exception as exc:  # pyarrow raises ArrowInvalid for non-Parquet files
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from None
    need = {"arrival_s", "prompt_tokens", "output_tokens"}
    if not need <= names:
        raise ValueError(f"{path}: a pool needs columns {sorted(need)}; the file has {sorted(names)}")
    cols = [c for c in ("arrival_s", "prompt_tokens", "output_tokens", "tenant", "priority", "model",
                        "log_type", "hash_ids", *_INT_COLUMNS) if c in names]
    block = 0
    if "hash_ids" in names:
        block = hash_block_tokens or _meta_block_tokens(path)
        if not block:
            raise ValueError(f"{path}: has a hash_ids column but no hash_block_tokens in its metadata; "
                             "pass hash_block_tokens= (tokens per hash id: 512 Mooncake, 16 Bailian)")
    dataset = ds.dataset(str(path), format="parquet")
    flt = None
    if start_s is not None or duration_s is not None:
        lo = 0.0 if start_s is None else float(start_s)
        flt = pc.field("arrival_s") >= lo
        if duration_s is not None:
            flt = flt & (pc.field("arrival_s") < lo + float(duration_s))
    t = dataset.to_table(columns=cols, filter=flt)
    col = lambda c: t.column(c).to_numpy() if c in t.column_names else None  # noqa: E731
    labels = {}
    for c in ("model", "log_type"):
        if c in t.column_names and t.column(c).null_count < t.num_rows:
            enc = t.column(c).combine_chunks().fill_null("").dictionary_encode()
            labels[c] = (np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int32),
                         tuple(str(x) for x in enc.dictionary.to_pylist()))
    chains = None
    if "hash_ids" in t.column_names:
        ids = t.column("hash_ids").combine_chunks()
        off = ids.offsets.to_numpy()
        flat = ids.flatten().to_numpy()
        chains = np.empty(t.num_rows, dtype=object)
        for i in range(t.num_rows):
            chains[i] = flat[off[i]:off[i + 1]]
    _check_columns(path, t)
    w = Workload.from_arrays(col("arrival_s"), col("prompt_tokens"), col("output_tokens"), col("tenant"),
                             col("priority"), labels=labels, source=path.name, sort=True,
                             hash_ids=chains, hash_block_tokens=block,
                             ints={k: col(k) for k in _INT_COLUMNS if k in t.column_names})
    if start_s is not None:
        w = w.shift(-float(start_s))
    if time_scale != 1.0:
        w = w.scale_time(time_scale)
    if drop_failed:
        w = w.drop_failed()
    return w
