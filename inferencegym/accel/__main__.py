"""``python -m inferencegym.accel build|status|clean``: the optional compiled simulator core.

    python -m inferencegym.accel build      # compile (~2-4 min on 2 cores); exit 0 even when it cannot
    python -m inferencegym.accel status     # which is in force in a fresh process, and why
    python -m inferencegym.accel clean      # remove the build (pure Python from then on)

``build --strict`` exits 1 when nothing was built (for a CI step that must have the compiled core).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from inferencegym import accel


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m inferencegym.accel", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile the listed simulator modules with mypyc")
    b.add_argument("--out", type=Path, default=None, help="build folder (default: build/accel beside the package)")
    b.add_argument("--jobs", type=int, default=2, help="parallel C compiler jobs")
    b.add_argument("--verbose", action="store_true", help="show mypyc's and the compiler's output")
    b.add_argument("--strict", action="store_true", help="exit 1 when nothing was built")
    sub.add_parser("status", help="say whether the compiled modules are in force, and why")
    sub.add_parser("clean", help="remove the build folder")
    a = ap.parse_args(argv)
    if a.cmd == "build":
        from inferencegym.accel.build import build

        res = build(a.out, jobs=a.jobs, quiet=not a.verbose)
        print(res.message)
        return 1 if a.strict and not res.ok else 0
    if a.cmd == "status":
        print(accel.status())
        return 0
    folder = accel.accel_dir()
    shutil.rmtree(folder, ignore_errors=True)
    print(f"accel: removed {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
