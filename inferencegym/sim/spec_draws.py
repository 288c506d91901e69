"""Speculative acceptance draws by comparison instead of a logarithm (a speed path; bit-identical).

A speculating sequence accepts ``j = min(int(log(1.0 - u) / lg) + 1, k + 1)`` tokens in an
iteration (``u`` a uniform of the replica's stream, ``lg = log(alpha)``: ``spec_step.apply_spec``).
``j`` is a step function of ``u``: ``j > m`` exactly when ``u`` is at or above the threshold
``t_m`` where ``int(log(1.0 - u) / lg)`` first reaches ``m``. :func:`draw_table` finds each
``t_m`` by bisection over the doubles of [0, 1), evaluating that same expression, so a draw is one to
four float comparisons instead of a ``log``, a division and an ``int``.

Why a comparison gives the formula's answer bit for bit: the computed quotient ``q(u)`` is within
``eps`` of the exact ``ln(1 - u) / lg`` (``1.0 - u`` rounds once, libm's ``log`` is within one
ulp, the division rounds once: ``eps < 2**-53 / |lg| + 3 * 2**-53 * q``, below 1e-14 for
``q <= 9``), and the exact quotient grows by at least ``d / |lg|`` over any step ``d`` of ``u``.
So from ``t_m + DELTA_U`` upwards the computed quotient is above ``m`` and below ``t_m - DELTA_U``
it is below ``m`` (``DELTA_U = 1e-9`` exceeds ``2 * |lg| * eps`` for every ``lg`` a double
``alpha`` can give, ``|lg| <= 745``), whatever the rounding does near ``t_m``. A ``u`` within
``DELTA_U`` of a threshold (odds ~1e-9 per draw) is answered by the formula itself.
``tests/sim/test_sim_spec_draws.py`` checks the tables against the formula at and around every
threshold and on random uniforms.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_right
from typing import Any, Final

Draw = tuple[int, float, float, float, float, float, Any]
"""One tenant's draw spec from :func:`tenant_draws`: ``(fixed, a1, b1, a2, b2, a3, table)`` (typed,
so that the compiled loops read its fields unboxed)."""

DELTA_U = 1e-9
"""Half-width of the zone around a threshold where the formula answers (see the module docstring)."""

_INF = math.inf
_log = math.log
_TABLES: dict[tuple[float, int], tuple | None] = {}
"""(lg, kmax) -> :func:`draw_table` (a pure function's memo: one entry per tenant alpha and depth)."""
_THRESHOLDS: dict[float, list[float]] = {}
"""lg -> :func:`thresholds` for ``m = 1..len`` (extended as longer tables are asked)."""


def formula_draw(u: float, lg: float, kmax: int) -> int:
    """The accepted count as ``spec_step.apply_spec`` computes it (the reference)."""
    j = int(_log(1.0 - u) / lg) + 1
    return kmax if j > kmax else j


def _as_bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _as_float(b: int) -> float:
    return struct.unpack("<d", struct.pack("<q", b))[0]


def thresholds(lg: float, k: int, first: int = 1) -> list[float]:
    """Per ``m = first..k``: the smallest double ``u`` in [0, 1) with ``int(log(1.0 - u) / lg) >= m``
    (``inf`` when no ``u`` below 1 reaches it), found by bisection over the doubles' bit patterns
    (each ``m`` on its own: the answers for ``1..k`` are those for ``1..j`` followed by ``j+1..k``)."""
    if not lg < 0.0:
        raise ValueError(f"lg must be log(alpha) < 0 for 0 < alpha < 1, got {lg!r}")
    top = math.nextafter(1.0, 0.0)
    out = []
    for m in range(first, k + 1):
        if int(_log(1.0 - top) / lg) < m:
            out.append(_INF)
            continue
        lo, hi = _as_bits(0.0), _as_bits(top)  # int(log(1.0)/lg) = int(-0.0) = 0 < m: lo fails
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if int(_log(1.0 - _as_float(mid)) / lg) >= m:
                hi = mid
            else:
                lo = mid
        out.append(_as_float(hi))
    return out


def draw_table(lg: float, kmax: int) -> tuple | None:
    """``(a1, b1, a2, b2, a3, edges, lg, kmax)`` for :func:`table_draw`: ``[a_m, b_m)`` is the
    zone around threshold ``t_m`` (``a_m = t_m - DELTA_U``, ``b_m = t_m + DELTA_U``; ``inf`` for a
    missing threshold), so ``u < a1`` draws 1, ``b1 <= u < a2`` draws 2 and ``b2 <= u < a3``
    draws 3 (what the hot loops inline); ``edges`` holds every zone's bounds in order (for the
    rest). None when two zones touch (thresholds closer than ``2 * DELTA_U``: alpha within ~1e-9
    of 1): the caller keeps the formula. Memoised per ``(lg, kmax)``."""
    key = (lg, kmax)
    if key in _TABLES:
        return _TABLES[key]
    ts = _THRESHOLDS.get(lg)
    if ts is None:
        ts = _THRESHOLDS[lg] = []
    if len(ts) < kmax - 1:  # (a depth switch asks a longer prefix: only the new ones bisected)
        ts += thresholds(lg, kmax - 1, len(ts) + 1)
    edges: list[float] = []
    for t in ts[:kmax - 1]:
        edges += (t - DELTA_U, t + DELTA_U)
    ok = all(x < y for x, y in zip(edges, edges[1:]) if y != _INF)
    pad = edges + [_INF] * max(0, 5 - len(edges))
    table = (pad[0], pad[1], pad[2], pad[3], pad[4], tuple(edges), lg, kmax) if ok else None
    _TABLES[key] = table
    return table


_NATIVE: Final = type(formula_draw).__name__ != "function"
"""Whether this module runs compiled (the accel build): :func:`table_draw` then scans the edges
(a few unboxed compares) instead of calling ``bisect_right`` through the module's globals (a
boxed call, twice the time); interpreted, ``bisect_right`` (C) is the cheaper. The same answer."""


def table_draw(u: float, table: tuple) -> int:
    """The accepted count for uniform ``u`` from a :func:`draw_table` (the loops inline its
    first three cases and call it for the rest): the number of zone edges at or below ``u``
    (``bisect_right``; the edges are sorted, so a scan up to the first edge above ``u`` gives the
    same count) says the zone or the count between zones."""
    edges: tuple[float, ...] = table[5]
    if _NATIVE:
        i = 0
        for x in edges:
            if x > u:
                break
            i += 1
    else:
        i = bisect_right(edges, u)
    if i & 1:  # inside a zone: the formula answers
        lg: float = table[6]
        kmax: int = table[7]
        return formula_draw(u, lg, kmax)
    return (i >> 1) + 1


_TENANT_DRAWS: dict[tuple, tuple] = {}
"""(alphas, default, kmax) -> :func:`tenant_draws` (a pure function's memo)."""


def tenant_draws(tenant_alpha: list, default_alpha: float, kmax: int) -> tuple:
    """Per tenant (and for a tenant beyond the list: the default) what a draw needs, as
    ``(fixed, a1, b1, a2, b2, a3, table)``: ``fixed`` the accepted count when alpha is 0 (1) or 1
    (``kmax``) and no uniform is drawn, else 0 and the :func:`draw_table` (the formula's
    ``(lg, kmax)`` in a one-zone table when the table is None)."""
    def one(a: float) -> tuple:
        if a <= 0.0:
            return (1, 0.0, 0.0, 0.0, 0.0, 0.0, None)
        if a >= 1.0:
            return (kmax, 0.0, 0.0, 0.0, 0.0, 0.0, None)
        lg = _log(a)
        tb = draw_table(lg, kmax)
        if tb is None:  # every u falls in one zone: table_draw's bisection, then the formula
            tb = (-_INF, _INF, _INF, _INF, _INF, (-_INF, _INF), lg, kmax)
        return (0, *tb[:5], tb)
    key = (tuple(tenant_alpha), default_alpha, kmax)
    got: tuple | None = _TENANT_DRAWS.get(key)  # (a plain tuple type: the memo's own object)
    if got is None:
        got = _TENANT_DRAWS[key] = ([one(default_alpha if x is None else x) for x in tenant_alpha],
                                    one(default_alpha))
    return got
