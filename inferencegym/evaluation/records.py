"""Run records of the benchmark tables: one JSON file per run, with the command that made it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def write_run_record(path: Path, script: str, task: str, seeds: list[int], rows: list[dict[str, Any]],
                     indent: int = 2) -> None:
    """Write ``{"command", "task", "seeds", "rows"}`` to ``path`` (parents made; written to a
    temporary file and renamed, so a reader never sees half a record). ``command`` is
    ``OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/<script>`` with this process's
    arguments."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    command = f"OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/{script} " + " ".join(sys.argv[1:])
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"command": command, "task": task, "seeds": seeds, "rows": rows}, indent=indent))
    tmp.replace(path)
