"""``python -m inferencegym.train --config rllib_configs/X.yaml [--steps N] [--seed S]``.

The entry point used by ``ray job submit ... -- python -m inferencegym.train --config ...``; the same
as ``inferencegym train``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from inferencegym.cli.train import train_command  # noqa: E402


def main() -> None:
    import typer

    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(train_command)
    app()


if __name__ == "__main__":
    main()
