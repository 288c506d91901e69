"""The benchmark scripts under ``benchmarks/`` are scripts, not a package: the tests import them by
putting that folder on ``sys.path`` for the import only."""

import contextlib
import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@contextlib.contextmanager
def bench_path():
    """``benchmarks/`` first on ``sys.path`` while the block runs (for the scripts' own imports)."""
    sys.path.insert(0, str(BENCH))
    try:
        yield
    finally:
        sys.path.remove(str(BENCH))


def _import(name: str):
    with bench_path():
        return importlib.import_module(name)


@pytest.fixture(scope="session")
def bench_module():
    """``bench_module(name)``: the benchmark script ``benchmarks/<name>.py`` as a module."""
    return _import
