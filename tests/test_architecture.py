"""The layers of docs/architecture.md, enforced by import-linter (contracts in pyproject.toml).

sim < workload < tasks < envs < policies < evaluation < tracking < rl < apps < cli: each layer
imports only the layers below it, the apps are independent of each other, and no package has an
import cycle between its modules (imports inside functions and ``if TYPE_CHECKING:`` imports count:
grimp reads them all).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import gymnasium as gym

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path, config: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [str(LINT)] + (["--config", str(config)] if config else [])
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_package_keeps_its_layer_and_acyclicity_contracts():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "BROKEN" not in res.stdout and res.stdout.count("KEPT") >= 3


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _fake_package(tmp: Path, imports: dict[str, str]) -> Path:
    """A package 'fakegym' with every module the contracts name, plus the given import lines."""
    names = set()
    for c in _contracts():
        for entry in c.get("layers", []) + c.get("modules", []):
            for part in entry.replace("|", ":").split(":"):
                names.add(part.strip().replace("inferencegym", "fakegym"))
    for name in names | set(imports):
        path = tmp.joinpath(*name.split("."))
        path.mkdir(parents=True, exist_ok=True)
        for i in range(1, len(name.split(".")) + 1):
            init = tmp.joinpath(*name.split(".")[:i], "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            init.touch()
        (path / "__init__.py").write_text(imports.get(name, ""))
    cfg = tmp / "contracts.toml"
    text = (ROOT / "pyproject.toml").read_text()
    cfg.write_text(text[text.index("[tool.importlinter]"):].replace("inferencegym", "fakegym"))
    return cfg


def test_the_contract_catches_an_upward_import(tmp_path):
    # sim reaching up into envs (as envs once reached up into policies and rl)
    cfg = _fake_package(tmp_path, {"fakegym.sim": "import fakegym.envs\n"})
    res = _lint(tmp_path, cfg)
    assert res.returncode != 0 and "fakegym.sim is not allowed to import fakegym.envs" in res.stdout


def test_the_contract_catches_a_cycle_inside_a_package(tmp_path):
    cfg = _fake_package(tmp_path, {"fakegym.envs.a": "def f():\n    import fakegym.envs.b\n",
                                   "fakegym.envs.b": "import fakegym.envs.a\n"})
    res = _lint(tmp_path, cfg)
    assert res.returncode != 0 and "No cycles are allowed in fakegym.envs" in res.stdout


def test_the_contract_counts_type_checking_imports(tmp_path):
    # a back edge hidden under `if TYPE_CHECKING:` is still a circle (the sim/ circle of issue 24)
    cfg = _fake_package(tmp_path, {"fakegym.sim.a": "from typing import TYPE_CHECKING\n"
                                                    "if TYPE_CHECKING:\n    import fakegym.sim.b\n",
                                   "fakegym.sim.b": "import fakegym.sim.a\n"})
    res = _lint(tmp_path, cfg)
    assert res.returncode != 0 and "No cycles are allowed in fakegym.sim" in res.stdout


def test_policies_read_the_simulator_through_its_views_only():
    """Routers and batching policies name the Protocols of sim/views.py, never Cluster / Replica,
    and config.py imports no registry (names are checked where the cluster is built)."""
    sim = ROOT / "inferencegym" / "sim"
    for name in ("router.py", "cache_routers.py", "oracle_router.py", "batching.py", "estimates.py",
                 "router_base.py"):
        text = (sim / name).read_text()
        for banned in ("from .cluster", "from .replica ", "from .replica import", "import Cluster",
                       "\"Cluster\"", "\"Replica\""):
            assert banned not in text, f"sim/{name} reaches past the views: {banned!r}"
    config = (sim / "config.py").read_text()
    for registry in ("ROUTERS", "SCHEDULERS", "ENGINE_PROFILES"):
        assert f"import {registry}" not in config and f", {registry}" not in config


def test_importing_the_package_registers_the_env_without_ray():
    code = ("import sys, gymnasium as gym, inferencegym\n"
            "env = gym.make('InferenceGym/LLMServe-v0', task_id='static_workload', episode_windows=2)\n"
            "env.reset(seed=0)\n"
            "print(sorted(m for m in ('ray', 'torch', 'mlflow') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_gym_make_with_the_module_prefix_needs_no_import():
    env = gym.make("inferencegym:InferenceGym/LLMServe-v0", task_id="bursty_workload", episode_windows=2)
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
