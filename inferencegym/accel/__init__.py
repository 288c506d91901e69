"""Optional accelerator: the simulator's hot modules compiled to C extensions (mypyc).

``python -m inferencegym.accel build`` compiles the modules in :data:`MODULES` (typed Python,
unchanged) into one mypyc group under :func:`accel_dir` (default ``build/accel`` beside the package,
git-ignored) and records the SHA-256 of every source file. ``import inferencegym`` calls
:func:`install`, which puts a meta-path finder in front of the normal import machinery that loads
the compiled modules *only* when the build is complete and current: the same module list, the same
Python ABI, and every listed source hashing as it did at build time. The group shares one runtime
library, so it is all or nothing: one stale source and every module stays pure Python, silently
(``python -m inferencegym.accel status`` says which is in force and why). ``INFERENCEGYM_PURE_PYTHON=1``
forces pure Python. Results are bit-identical either way (``benchmarks/sim_digest.py``,
``tests/accel/``): the compiled modules are the same source, built with ``-ffp-contract=off``.

This module is imported by ``inferencegym/__init__.py`` and must stay cheap: the standard library
only, one small JSON read and the hashes of the listed sources (~1 ms), nothing from ``sim``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import sys
from pathlib import Path

MODULES: tuple[str, ...] = tuple(f"inferencegym.sim.{m}" for m in (
    "batching", "chunk_ahead", "cluster", "cluster_readout", "estimates", "events", "execution_fast", "kv_cache",
    "metrics", "outputs", "recent",
    "replica", "replica_admission", "replica_advance", "request", "slo", "spec_acceptance", "spec_chunks",
    "spec_ahead", "spec_draws", "spec_step", "submission", "tbt_small", "window_metrics",
))
"""The compiled group (one mypyc group: all or nothing). A module here must type-check under mypy
with runtime-true annotations (mypyc enforces them) and keep its classes free of dynamic
attributes; a class that must stay a Python class is marked ``@sim.interpreted.interpreted``."""

GROUP = "inferencegym_accel"
"""mypyc group name: the shared runtime library is the top-level module ``GROUP + "__mypyc"``."""

MANIFEST = "manifest.json"
"""File in :func:`accel_dir` written last by a successful build: module -> source hash and binary."""

PURE_ENV = "INFERENCEGYM_PURE_PYTHON"
"""Environment variable: ``1`` forces pure Python whatever is built."""

DIR_ENV = "INFERENCEGYM_ACCEL_DIR"
"""Environment variable: the build folder to use instead of ``build/accel`` beside the package."""

PACKAGE_DIR = Path(__file__).resolve().parent.parent
"""The ``inferencegym`` package folder (sources are hashed relative to it)."""

_state: dict[str, object] = {"active": False, "reason": "not checked (inferencegym not imported)"}


def accel_dir() -> Path:
    """The build folder: ``$INFERENCEGYM_ACCEL_DIR`` or ``build/accel`` next to the package folder."""
    env = os.environ.get(DIR_ENV)
    return Path(env) if env else PACKAGE_DIR.parent / "build" / "accel"


def source_path(module: str) -> Path:
    """Source file of a listed module (``inferencegym.sim.x`` -> ``<package>/sim/x.py``)."""
    return PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ext_suffix() -> str:
    """This interpreter's extension-module suffix (e.g. ``.cpython-311-x86_64-linux-gnu.so``)."""
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def check(folder: Path | None = None) -> tuple[dict[str, Path] | None, str]:
    """Whether the build in ``folder`` may be used: ``(module -> binary, "")`` when it is complete
    and current, else ``(None, reason)`` (one line)."""
    folder = accel_dir() if folder is None else folder
    try:
        man = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return None, f"not built ({folder}: run `python -m inferencegym.accel build`)"
    except (OSError, ValueError) as e:
        return None, f"unreadable manifest {folder / MANIFEST}: {e}"
    if not isinstance(man, dict) or man.get("ext_suffix") != ext_suffix():
        return None, f"built for another Python ({man.get('ext_suffix') if isinstance(man, dict) else '?'})"
    mods = man.get("modules")
    if not isinstance(mods, dict) or sorted(mods) != sorted(MODULES + (GROUP + "__mypyc",)):
        return None, "built for another module list (rebuild)"
    files: dict[str, Path] = {}
    for name, entry in mods.items():
        so = folder / str(entry.get("binary", ""))
        if not so.is_file():
            return None, f"missing binary {so} (rebuild)"
        files[name] = so
        if name in MODULES:
            src = source_path(name)
            try:
                same = sha256_file(src) == entry.get("sha256")
            except OSError:
                same = False
            if not same:
                return None, f"stale: {src.relative_to(PACKAGE_DIR.parent)} changed since the build (rebuild)"
    return files, ""


class _CompiledFinder:
    """Meta-path finder: the listed modules (and the group's runtime library) from their binaries."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(self, name: str, path=None, target=None):
        """A spec loading ``name``'s compiled binary, or None (the normal finders go on)."""
        so = self.files.get(name)
        if so is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(name, str(so))
        return importlib.machinery.ModuleSpec(name, loader, origin=str(so))

    def invalidate_caches(self) -> None:
        """Nothing cached."""


def install() -> bool:
    """Put the compiled group in front of the import machinery when it may be used (once per
    process; a no-op when any listed module is already imported as Python). Returns whether the
    compiled modules are in force."""
    if any(isinstance(f, _CompiledFinder) for f in sys.meta_path):
        return bool(_state["active"])
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        _state.update(active=False, reason=f"pure Python forced ({PURE_ENV}={os.environ[PURE_ENV]})")
        return False
    if any(m in sys.modules for m in MODULES):
        _state.update(active=False, reason="a listed module was imported before inferencegym")
        return False
    files, reason = check()
    if files is None:
        _state.update(active=False, reason=reason)
        return False
    sys.meta_path.insert(0, _CompiledFinder(files))
    _state.update(active=True, reason=f"compiled ({len(MODULES)} modules from {accel_dir()})")
    return True


def active() -> bool:
    """Whether the compiled modules are in force in this process."""
    return bool(_state["active"])


def status() -> str:
    """One line: ``compiled (...)`` or why pure Python is in force."""
    return str(_state["reason"]) if _state["active"] else f"pure Python: {_state['reason']}"
