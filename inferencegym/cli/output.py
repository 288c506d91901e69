"""How the command line prints: tables never cut to the terminal's (or a pipe's 80-column) width,
progress on stderr, metric values that were not measured said in words instead of ``nan``.

Rich sizes a console to the terminal, and to 80 columns when stdout is a pipe or a log file; a
table wider than that has its cells wrapped or cut with an ellipsis. :func:`print_table` measures
the table first and prints it on a console at least as wide as the table needs, so a log holds the
whole table on one line per row (a terminal narrower than the table wraps the lines itself).
"""

from __future__ import annotations

import math
from typing import Any

NOT_MEASURED = "n/a (not measured)"
"""What a summary prints for a metric whose value is missing or NaN."""


def table_width(renderable: Any) -> int:
    """The width ``renderable`` needs to print without wrapping or cutting any cell."""
    from rich.console import Console
    from rich.measure import Measurement

    probe = Console(width=100_000, file=None, force_terminal=False, color_system=None)
    return Measurement.get(probe, probe.options, renderable).maximum


def print_table(renderable: Any, *, stderr: bool = False, console: Any = None) -> None:
    """Print ``renderable`` (a rich Table) uncut: on ``console`` if it is wide enough, else on a
    console to the same stream as wide as the table."""
    from rich.console import Console

    c = console if console is not None else Console(stderr=stderr)
    need = table_width(renderable)
    if need > c.width:
        c = Console(stderr=c.stderr if console is not None else stderr, width=need, soft_wrap=False)
    c.print(renderable)


def fmt_metric(value: Any, spec: str = ".4g", missing: str = NOT_MEASURED) -> str:
    """``value`` formatted with ``spec``; ``missing`` when it is None or NaN (never ``nan``)."""
    if value is None:
        return missing
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    return missing if math.isnan(x) else format(x, spec)


__all__ = ["print_table", "table_width", "fmt_metric", "NOT_MEASURED"]


def json_safe(x: Any) -> Any:
    """JSON-safe copy of ``x``: NaN/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
