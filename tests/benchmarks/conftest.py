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


def play_beside_the_rule(policy, seed: int, windows: int, task: str = "adversarial_multitenant"):
    """``(rule's forecast phase, policy's action, rule's action)`` per window of one episode that ``policy``
    plays, ``phase_rule`` shadowing the same observations (the adversarial scripts' guards and overrides
    are specified per forecast phase)."""
    from inferencegym.envs.actions import ServeAction
    from inferencegym.envs.serve_env import LLMServeEnv
    from inferencegym.policies.phase_rule import PhaseRulePolicy

    env, shadow = LLMServeEnv(task), PhaseRulePolicy(task)
    policy.reset(seed)
    shadow.reset(seed)
    obs, info = env.reset(seed=seed)
    out = []
    for _ in range(windows):
        a = ServeAction.from_any(policy.act(obs, info))
        ra = shadow.act(obs, info)
        out.append((shadow.detector.forecast(), a, ra))
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    return out


@pytest.fixture(scope="session")
def play_with_rule():
    """:func:`play_beside_the_rule` (a fixture: test modules do not import ``conftest``)."""
    return play_beside_the_rule
