"""Shared test fixtures. Environment set before torch / Ray are imported anywhere."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "1")

import pytest

try:  # property tests: no per-example deadline (a loaded 2-core machine is slow, not wrong)
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("inferencegym", deadline=None)
    _hyp_settings.load_profile("inferencegym")
except ImportError:  # hypothesis is a dev dependency; tests that need it import it themselves
    pass

REPO_ROOT = Path(__file__).resolve().parents[1]


def _reference_dir() -> Path | None:
    env = os.environ.get("INFERENCEGYM_REFERENCE_DIR")
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared" / "reference")
    for c in candidates:
        if c.is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The shared reference data (`../shared/reference`). Under CI its absence is a failure."""
    ref = _reference_dir()
    if ref is None:
        msg = ("reference data not found: expected ../shared/reference beside the repo "
               "(or INFERENCEGYM_REFERENCE_DIR); CI must provide it")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return ref


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def local_ray():
    """A local Ray for one tiny RLlib test (2 CPUs, no dashboard, one torch thread): started unless
    one already runs, and shut down afterwards only if this fixture started it."""
    import ray
    import torch

    torch.set_num_threads(1)
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A ``python_internals`` test patches simulator methods or reads class annotations, which the
    compiled core (``inferencegym.accel``) does not route through Python: while it is in force, the
    test runs in a subprocess with ``INFERENCEGYM_PURE_PYTHON=1`` and passes or fails with it."""
    from inferencegym import accel

    if pyfuncitem.get_closest_marker("python_internals") is None or not accel.active():
        return None
    import subprocess
    import sys

    env = {**os.environ, accel.PURE_ENV: "1"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", pyfuncitem.nodeid],
                         cwd=pyfuncitem.config.rootpath, env=env, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, f"pure-Python run of {pyfuncitem.nodeid} failed:\n{res.stdout[-4000:]}"
    return True
