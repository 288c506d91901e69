"""Build the accelerator: compile :data:`inferencegym.accel.MODULES` with mypyc into the build folder.

The sources are compiled as they are (no copy, no edit) into a fresh temporary folder beside the
target; the manifest (module -> source SHA-256 and binary) is written last and the folder is moved
into place only when every step succeeded, so a failed or interrupted build leaves the previous
state (or none) and never a half-written one. C is compiled with ``-ffp-contract=off`` (no fused
multiply-add contraction, so floating point stays bit-identical to the interpreter's on every CPU).
Anything that stops the build (no mypyc, no C compiler, a type error, a compiler error) is reported
in one line and the package keeps running as pure Python.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from inferencegym.accel import GROUP, MANIFEST, MODULES, PACKAGE_DIR, accel_dir, ext_suffix, sha256_file, source_path

CFLAGS = ("-ffp-contract=off",)
"""Extra C flags of every compiled module (no FMA contraction: bit-identical floats)."""


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """Outcome of one build."""

    ok: bool
    """Whether the compiled group was written (and is current)."""
    message: str
    """One line for the user: where it went and how long it took, or why nothing was built."""
    seconds: float = 0.0
    """Wall time of the build (mypyc and the C compiler)."""


class BuildError(Exception):
    """A step of the build failed; the message is the one line shown."""


def _compiler() -> str:
    """The C compiler setuptools will call (``$CC`` or Python's configured one), checked to exist."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    exe = shlex.split(cc)[0] if cc.strip() else "cc"
    if shutil.which(exe) is None:
        raise BuildError(f"no C compiler ({exe!r} not found; install gcc or set CC)")
    return exe


def _mypycify(paths: list[str], target_dir: Path) -> list:
    """mypyc's extensions for ``paths`` (type-checks and writes the C sources into ``target_dir``)."""
    try:
        from mypyc.build import mypycify
    except ImportError:
        raise BuildError("mypyc is not installed (`pip install mypy`)") from None
    try:
        exts = mypycify(paths + ["--ignore-missing-imports", "--follow-imports=silent"],
                        opt_level="3", target_dir=str(target_dir), group_name=GROUP)
    except SystemExit as e:  # mypyc reports type errors on stdout and exits
        raise BuildError(f"mypyc refused the sources (exit {e.code}; its messages are above)") from None
    for ext in exts:
        ext.extra_compile_args = list(ext.extra_compile_args or []) + list(CFLAGS)
    return exts


def _compile(exts: list, build_lib: Path, build_temp: Path, jobs: int) -> None:
    """Run setuptools' ``build_ext`` on ``exts`` into ``build_lib``."""
    from setuptools import Distribution

    dist = Distribution({"name": GROUP, "ext_modules": exts})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib, cmd.build_temp, cmd.parallel = str(build_lib), str(build_temp), max(1, jobs)
    try:
        dist.run_command("build_ext")
    except Exception as e:  # CompileError, LinkError, DistutilsExecError ...
        raise BuildError(f"the C build failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None


def _manifest(build_lib: Path, hashes: dict[str, str], seconds: float) -> dict:
    """The manifest of a finished build in ``build_lib`` (binaries relative to it)."""
    suffix = ext_suffix()
    mods: dict[str, dict] = {}
    for name in MODULES + (GROUP + "__mypyc",):
        rel = Path(*name.split(".")).with_suffix("").as_posix() + suffix
        if not (build_lib / rel).is_file():
            raise BuildError(f"the build did not produce {rel}")
        mods[name] = {"binary": rel, **({"sha256": hashes[name]} if name in hashes else {})}
    import mypy.version

    return {"format": 1, "ext_suffix": suffix, "python": sys.version.split()[0], "mypy": mypy.version.__version__,
            "cflags": list(CFLAGS), "build_s": round(seconds, 1), "modules": mods}


def build(out: Path | None = None, *, jobs: int = 2, quiet: bool = True) -> BuildResult:
    """Compile the group into ``out`` (default :func:`accel_dir`); never raises for a build that
    cannot be done (the result says why)."""
    out = accel_dir() if out is None else out
    t0 = time.perf_counter()
    try:
        _compiler()
        hashes = {m: sha256_file(source_path(m)) for m in MODULES}
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".accel-build-", dir=out.parent))
        try:
            lib = work / "lib"
            cwd = os.getcwd()
            os.chdir(PACKAGE_DIR.parent)  # mypyc names modules from paths relative to the cwd
            try:
                paths = [source_path(m).relative_to(PACKAGE_DIR.parent).as_posix() for m in MODULES]
                exts = _run_quietly(quiet, _mypycify, paths, work / "c")
                _run_quietly(quiet, _compile, exts, lib, work / "tmp", jobs)
            finally:
                os.chdir(cwd)
            if {m: sha256_file(source_path(m)) for m in MODULES} != hashes:
                raise BuildError("a source changed during the build (run it again)")
            man = _manifest(lib, hashes, time.perf_counter() - t0)
            (lib / MANIFEST).write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
            _swap_in(lib, out)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except BuildError as e:
        return BuildResult(ok=False, message=f"accel: not built, pure Python stays in force: {e}",
                           seconds=time.perf_counter() - t0)
    dt = time.perf_counter() - t0
    return BuildResult(ok=True, message=f"accel: {len(MODULES)} modules compiled into {out} in {dt:.0f} s",
                       seconds=dt)


def _swap_in(lib: Path, out: Path) -> None:
    """Replace ``out`` by the finished ``lib`` (the old build is removed only after the move)."""
    old = None
    if out.exists():
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
    lib.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _run_quietly(quiet: bool, fn, *args):
    """Call ``fn`` with mypyc's and the C compiler's chatter (file descriptors 1 and 2) hidden when
    ``quiet``; shown (its last 4,000 characters) when the step fails."""
    if not quiet:
        return fn(*args)
    with tempfile.TemporaryFile(mode="w+") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        ok = False
        try:
            out = fn(*args)
            ok = True
            return out
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, keep in zip((1, 2), saved):
                os.dup2(keep, fd)
                os.close(keep)
            if not ok:
                log.seek(0)
                sys.stderr.write(log.read()[-4000:])
