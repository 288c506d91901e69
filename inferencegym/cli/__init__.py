"""The ``inferencegym`` command line.

Each command group lives in its own module here and exposes ``register(app)``; heavy imports
(Ray, torch, MLflow) happen inside the commands, so ``inferencegym --help`` stays fast.
``main()`` imports only the module of the command it is asked to run (``inferencegym simulate``
does not import the env, policy and RL modules the other commands need: ~0.4 CPU s at start-up);
``inferencegym.cli.app`` (tests, ``--help``) has every command.
"""

from __future__ import annotations

import importlib
import sys

import typer

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

COMMAND_MODULE = {"demo": "demo", "simulate": "simulate", "calibrate": "calibrate", "presets": "calibrate",
                  "data": "data", "evaluate": "evaluate", "train": "train", "report": "report",
                  "tune": "tune_cmd", "serve": "serve_cmd", "server": "server_cmd", "dashboard": "dashboard",
                  "replay": "replay"}
"""Command name -> the module that registers it (``tests/cli/test_cli_lazy.py`` checks it is complete)."""


def build_app(modules=_COMMAND_MODULES) -> typer.Typer:
    """The Typer app with the commands of ``modules`` (every command by default)."""
    app = typer.Typer(
        name="inferencegym",
        help="InferenceGym: a calibrated LLM-serving simulator and RL environments on Ray.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
    )
    for name in modules:
        qual = f"{__name__}.{name}"
        try:
            mod = importlib.import_module(qual)
        except ModuleNotFoundError as exc:  # not written yet
            if exc.name == qual:
                continue
            raise
        mod.register(app)
    if len(app.registered_commands) + len(app.registered_groups) == 1:
        @app.callback()
        def _group() -> None:
            """InferenceGym: a calibrated LLM-serving simulator and RL environments on Ray."""

    # Every command: user errors as one line on stderr (exit 2), not a traceback (cli/errors.py).
    from inferencegym.cli.errors import install_error_boundary

    install_error_boundary(app)
    return app


def __getattr__(name: str):
    if name == "app":  # every command, built on first use
        app = build_app()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    cmd = sys.argv[1] if len(sys.argv) > 1 else None
    mod = COMMAND_MODULE.get(cmd) if cmd is not None else None
    (build_app((mod,)) if mod is not None else build_app())()


if __name__ == "__main__":
    main()
