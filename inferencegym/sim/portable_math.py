"""Elementwise ``exp``, ``log``, ``log1p`` and ``power`` of float64 arrays with the same bits on every
x86 machine.

numpy's vector ``exp``, ``log``, ``log1p``, ``expm1`` and ``power`` of float64 run SIMD kernels
(SVML) on AVX-512 CPUs and the C library's functions elsewhere; the two differ in the last bit for
about 5 % of inputs (measured on 200,000 draws: ``exp`` 4.7 %, ``log`` 0.07 %, ``power`` 5.5 %). A
seeded result that passes through them (a lognormal token count rounded to an integer, a Zipf
weight, a phase likelihood) then differs between machines on rare seeds: the recorded behaviour
digest of ``cluster_multiturn`` did not reproduce on an AVX-512 machine until its length tables and
Zipf weights went through here. These helpers apply :mod:`math`'s functions (the C library, what
numpy itself calls where it has no such kernel) one element at a time, so a seed gives the same
result on every machine. Use them wherever a seeded result passes through a transcendental function
of an array; ``sin`` / ``cos``, ``sqrt``, sums and ``cumsum`` are the same on both paths and need
nothing.

Edge cases follow numpy's float semantics (no exceptions): ``exp`` overflows to ``inf``, ``log`` of 0
is ``-inf`` and of a negative number ``nan``, ``power`` of a negative base to a non-integer exponent
is ``nan``.

>>> import numpy as np
>>> from inferencegym.sim import portable_math as pm
>>> pm.exp(np.array([0.0, 1.0])).tolist() == [1.0, 2.718281828459045]
True
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

__all__ = ["exp", "log", "log1p", "power"]


def _exp1(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def _log1(v: float) -> float:
    if v > 0.0:
        return math.log(v)
    return -math.inf if v == 0.0 else math.nan


def _log1p1(v: float) -> float:
    if v > -1.0:
        return math.log1p(v)
    return -math.inf if v == -1.0 else math.nan


def _pow1(b: float, e: float) -> float:
    try:
        return math.pow(b, e)
    except (ValueError, OverflowError):
        # numpy's answers: a negative base to a non-integer power is nan; 0 to a negative power and an
        # overflow are inf, negative for a negative base (or -0.0) to an odd integer power
        if b < 0.0 and not e.is_integer():
            return math.nan
        return math.copysign(math.inf, b) if e.is_integer() and e % 2 == 1 else math.inf


def _map1(f: Callable[[float], float], x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    out = np.fromiter(map(f, a.ravel().tolist()), dtype=np.float64, count=a.size)
    return out.reshape(a.shape)


def exp(x: Any) -> np.ndarray:
    """``e ** x`` elementwise (float64 array of ``x``'s shape)."""
    return _map1(_exp1, x)


def log(x: Any) -> np.ndarray:
    """The natural logarithm elementwise (float64 array of ``x``'s shape)."""
    return _map1(_log1, x)


def log1p(x: Any) -> np.ndarray:
    """``log(1 + x)`` elementwise, accurate near 0 (float64 array of ``x``'s shape)."""
    return _map1(_log1p1, x)


def power(base: Any, exponent: Any) -> np.ndarray:
    """``base ** exponent`` elementwise after broadcasting (float64 array)."""
    b, e = np.broadcast_arrays(np.asarray(base, dtype=np.float64), np.asarray(exponent, dtype=np.float64))
    out = np.fromiter(map(_pow1, b.ravel().tolist(), e.ravel().tolist()), dtype=np.float64, count=b.size)
    return out.reshape(b.shape)
