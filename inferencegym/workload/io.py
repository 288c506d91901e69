"""Writing a workload back to CSV (the simulator's replay format), atomically."""

from __future__ import annotations

import io as _io
from pathlib import Path

from .fit import atomic_write_bytes
from .trace import Workload

__all__ = ["write_replay_csv"]


def write_replay_csv(w: Workload, path: str | Path) -> Path:
    """``arrived_at,num_prefill_tokens,num_decode_tokens,tenant,priority`` (readable by
    ``load_trace(path, format="replay")``); times with full float precision (repr)."""
    buf = _io.StringIO()
    buf.write("arrived_at,num_prefill_tokens,num_decode_tokens,tenant,priority\n")
    for a, p, o, t, q in zip(w.arrival_s.tolist(), w.prompt_tokens.tolist(), w.output_tokens.tolist(),
                             w.tenant.tolist(), w.priority.tolist()):
        buf.write(f"{a!r},{p},{o},{t},{q}\n")
    atomic_write_bytes(path, buf.getvalue().encode())
    return Path(path)
