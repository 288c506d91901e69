"""The command line imports only the module of the command it runs (start-up time), and the map
from command names to modules is complete."""

from __future__ import annotations

import importlib
import subprocess
import sys

import typer
from typer.testing import CliRunner

from inferencegym import cli


def _names(app: typer.Typer) -> set[str]:
    return ({c.name or c.callback.__name__ for c in app.registered_commands}
            | {g.name for g in app.registered_groups})


def test_every_command_maps_to_the_module_that_registers_it():
    full = _names(cli.build_app())
    assert full == set(cli.COMMAND_MODULE)
    for name, mod in cli.COMMAND_MODULE.items():
        assert name in _names(cli.build_app((mod,))), (name, mod)
    assert set(cli.COMMAND_MODULE.values()) == set(cli._COMMAND_MODULES)
    importlib.import_module("inferencegym.cli.simulate")


def test_simulate_runs_without_the_env_policy_and_rl_modules():
    code = ("import sys\nsys.argv = ['inferencegym', 'simulate', '--rate', '2', '--duration-s', '5', '--json']\n"
            "from inferencegym.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in ('inferencegym.envs', 'inferencegym.rl.config', 'inferencegym.policies', "
            "'scipy.special', 'ray', 'torch') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"requests_total"' in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_single_command_app_still_takes_the_command_name():
    res = CliRunner().invoke(cli.build_app(("simulate",)), ["simulate", "--help"])
    assert res.exit_code == 0 and "--trace" in res.output
