"""Helpers of the accelerator's tests: run code in a fresh process on this tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from inferencegym import accel

REPO = Path(__file__).resolve().parents[2]


def run_py(code: str, *, accel_dir: Path | None = None, pure: bool = False, timeout: int = 900,
           args: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run Python code (or ``-m`` args) in a fresh process on this tree, with the given build folder."""
    env = {k: v for k, v in os.environ.items() if k not in (accel.PURE_ENV, accel.DIR_ENV)}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if accel_dir is not None:
        env[accel.DIR_ENV] = str(accel_dir)
    if pure:
        env[accel.PURE_ENV] = "1"
    cmd = [sys.executable, *(args if args is not None else ["-c", code])]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
