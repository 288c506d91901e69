"""Arrow columns to numpy without importing pandas.

``pyarrow.Array.to_numpy()`` (and ``np.asarray`` on an Arrow array) imports pandas the first time it
is called in a process (pyarrow's pandas shim checks for pandas types), which costs ~0.24 CPU s;
the trace loaders only need the data buffer of a numeric column without nulls. :func:`to_numpy`
reads that buffer directly (the same zero-copy, read-only view ``to_numpy`` returns) and falls back
to ``to_numpy(zero_copy_only=False)`` for anything else (booleans, strings, dictionaries, nulls).

:func:`threads_pay`: whether pyarrow's readers should parse on its thread pool (only for files of
several blocks: starting the pool costs a small trace ~0.02 CPU s and ~0.1 s of wall time on a
busy machine, and one block is parsed by one thread anyway; the values read are the same).
"""

from __future__ import annotations

import os

import numpy as np


def threads_pay(path, block_bytes: int) -> bool:
    """True when the file at ``path`` is larger than two reader blocks of ``block_bytes`` (then
    pyarrow's readers parse blocks side by side); False for smaller or unreadable-size files."""
    try:
        return os.path.getsize(path) > 2 * block_bytes
    except OSError:
        return True

_NUMERIC = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
            "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
            "halffloat": np.float16, "float": np.float32, "double": np.float64}
"""Arrow primitive type names -> numpy dtype (the dtypes ``to_numpy`` gives them)."""


def to_numpy(arr) -> np.ndarray:
    """``arr.to_numpy()`` for an Arrow ``Array`` or ``ChunkedArray`` (values and dtype equal),
    without pyarrow's pandas import for numeric columns with no nulls."""
    chunks = getattr(arr, "chunks", None)
    if chunks is not None:  # ChunkedArray
        if len(chunks) == 1:
            return to_numpy(chunks[0])
        if not chunks:
            return arr.to_numpy()
        return np.concatenate([to_numpy(c) for c in chunks])
    dt = _NUMERIC.get(str(arr.type))
    if dt is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    buf = arr.buffers()[1]
    off = arr.offset
    n = len(arr)
    if buf is None or n == 0:
        return np.zeros(0, dtype=dt)
    return np.frombuffer(buf, dtype=dt, count=n, offset=off * np.dtype(dt).itemsize)
