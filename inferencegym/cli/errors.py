"""One-line errors instead of tracebacks for the command line.

Every command registered on the ``inferencegym`` app is wrapped (:func:`install_error_boundary`): an
error that comes from what the user gave (a float option that is NaN or infinite, checked for
every command by :func:`check_finite`; a missing or unreadable file, a malformed YAML, a value
out of range, a checkpoint that is not one) is printed as ``error: <what was wrong>`` on stderr and
the command exits with status 2; a failure of the environment (out of memory, an interrupted run)
exits with 1. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Callable
from typing import Any

import typer

#: Exceptions that mean "the input was wrong" (exit 2).
USER_ERRORS: tuple[type[BaseException], ...] = (
    FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError,
    ValueError, KeyError, UnicodeError, OverflowError,
)


def _user_error_types() -> tuple[type[BaseException], ...]:
    extra: list[type[BaseException]] = []
    try:
        import yaml

        extra.append(yaml.YAMLError)
    except ImportError:  # pragma: no cover
        pass
    # a training config error (``inferencegym.rl.config.ConfigError``) is a ValueError: caught
    # above without importing the RL stack (Ray, torch) into every command
    return USER_ERRORS + tuple(extra)


def one_line(exc: BaseException, limit: int = 400) -> str:
    """The exception's message on one line (YAML errors span several), at most ``limit`` chars."""
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, KeyError) and exc.args:
        msg = str(exc.args[0])
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)) \
            and exc.filename and str(exc.filename) not in msg:
        msg = f"{msg}: {exc.filename}"
    return msg if len(msg) <= limit else msg[:limit] + " ..."


def fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` on stderr and exit with ``code``."""
    from rich.console import Console
    from rich.markup import escape

    # escaped: a message echoes what the user gave ("[/x]" would otherwise be a rich markup error)
    Console(stderr=True, soft_wrap=True, highlight=False).print(f"[red]error:[/red] {escape(message)}",
                                                                markup=True)
    raise typer.Exit(code)


def _is_float_annotation(ann: Any) -> bool:
    if ann is float or ann == "float":
        return True
    if isinstance(ann, str):  # postponed annotations: "float | None", "Optional[float]"
        return ann.replace(" ", "") in ("float|None", "None|float", "Optional[float]", "typing.Optional[float]")
    return float in typing.get_args(ann) and all(a in (float, type(None)) for a in typing.get_args(ann))


def float_options(fn: Callable[..., Any]) -> dict[str, str]:
    """``{parameter: flag}`` of every float (or optional float) option of a command callback."""
    out: dict[str, str] = {}
    for name, p in inspect.signature(fn).parameters.items():
        if not _is_float_annotation(p.annotation):
            continue
        decls = [d for d in (getattr(p.default, "param_decls", None) or ()) if d.startswith("--")]
        out[name] = decls[0] if decls else "--" + name.replace("_", "-")
    return out


def check_finite(kwargs: dict[str, Any], options: dict[str, str]) -> None:
    """The one validator of float options: NaN and +-inf are refused (click's FLOAT type parses
    ``nan``/``inf``, and ``nan`` passes every ``min=``/``max=`` and ``> 0`` check silently)."""
    for name, flag in options.items():
        v = kwargs.get(name)
        if isinstance(v, float) and not math.isfinite(v):
            fail(f"{flag} must be a finite number, got {v}")


def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a command callback: NaN/inf float options and user errors -> one line + exit 2,
    MemoryError -> exit 1."""
    floats = float_options(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        check_finite(kwargs, floats)
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt, SystemExit):
            raise  # (click's own exceptions are none of the user errors below: they pass through too,
            # without importing the click package into every command)
        except MemoryError:
            fail("out of memory: the request is too large for this machine; lower the sizes "
                 "(replicas, duration, rate, bins)", code=1)
        except _user_error_types() as exc:
            fail(one_line(exc), code=2)

    wrapper.__inferencegym_guarded__ = True  # type: ignore[attr-defined]
    return wrapper


def install_error_boundary(app: typer.Typer) -> None:
    """Wrap every command (and those of sub-apps) of ``app`` with :func:`guard` (idempotent)."""
    for info in app.registered_commands:
        if info.callback is not None and not getattr(info.callback, "__inferencegym_guarded__", False):
            info.callback = guard(info.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            install_error_boundary(group.typer_instance)


__all__ = ["install_error_boundary", "guard", "fail", "one_line", "USER_ERRORS", "float_options",
           "check_finite"]
