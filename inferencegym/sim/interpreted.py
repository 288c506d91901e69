"""``@interpreted``: keep a class a plain Python class when its module is compiled.

The optional accelerator (``inferencegym.accel``) compiles some of ``sim/``'s modules with mypyc,
which turns their classes into native classes (fixed attributes, no ``__dict__``, no subclassing by
builtin exception types but a few). A class decorated with anything mypyc does not know stays an
ordinary Python class inside the compiled module; this identity decorator is that marker. In pure
Python it does nothing.
"""

from __future__ import annotations

from typing import TypeVar

_C = TypeVar("_C", bound=type)


def interpreted(cls: _C) -> _C:
    """Return ``cls`` unchanged (compiled modules keep a class so marked a Python class)."""
    return cls
