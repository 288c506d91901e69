"""The ``inferencegym`` command line.

Each command group lives in its own module here and exposes ``register(app)``; heavy imports
(Ray, torch, MLflow) happen inside the commands, so ``inferencegym --help`` stays fast.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="inferencegym",
    help="InferenceGym: a calibrated LLM-serving simulator and RL environments on Ray.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# Modules that register commands, in help order. A module that is missing is skipped; one that
# fails to import for any other reason raises (a broken CLI must not hide itself).
_COMMAND_MODULES = (
    "demo",
    "simulate",
    "calibrate",
    "data",
    "evaluate",
    "train",
    "report",
    "tune_cmd",
    "serve_cmd",
    "server_cmd",
    "dashboard",
    "replay",
)

for _name in _COMMAND_MODULES:
    _qual = f"{__name__}.{_name}"
    try:
        _mod = importlib.import_module(_qual)
    except ModuleNotFoundError as exc:  # not written yet
        if exc.name == _qual:
            continue
        raise
    _mod.register(app)

# Every command: user errors as one line on stderr (exit 2), not a traceback (cli/errors.py).
from inferencegym.cli.errors import install_error_boundary  # noqa: E402

install_error_boundary(app)

def main() -> None:
    app()


if __name__ == "__main__":
    main()
