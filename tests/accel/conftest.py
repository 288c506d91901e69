"""A compiled build of the simulator core for the accelerator's tests: the default one
(``build/accel``) when it is current, else one built here into a temporary folder (mypyc and a C
compiler needed; ~1-2 min on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from accel_util import run_py

from inferencegym import accel


@pytest.fixture(scope="session")
def compiled_dir(tmp_path_factory) -> Path:
    """A complete, current build folder of the compiled group."""
    files, _ = accel.check(accel.accel_dir())
    if files is not None:
        return accel.accel_dir()
    out = tmp_path_factory.mktemp("accel") / "build"
    res = run_py("", args=["-m", "inferencegym.accel", "build", "--out", str(out), "--strict"], timeout=1800)
    assert res.returncode == 0, ("the accelerator's tests need a compiled build (mypyc: `pip install mypy`, "
                                 f"and a C compiler): {res.stdout[-2000:]}{res.stderr[-2000:]}")
    return out
