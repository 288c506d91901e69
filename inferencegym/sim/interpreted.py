"""Markers for the optional compiled core (``inferencegym.accel``, mypyc); no-ops in pure Python.

* ``@interpreted``: keep a class a plain Python class inside a compiled module. mypyc turns the
  classes of the modules it compiles into native classes (fixed attributes, no ``__dict__``, and no
  subclassing of builtin exception types but a few); a class decorated with anything mypyc does not
  know stays an ordinary class, and this identity decorator is that marker.
* ``@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)``: a native class that
  ``copy.deepcopy`` and ``pickle`` can rebuild without calling ``__init__`` (as they do a Python
  object): the envs' lookahead ceiling deep-copies whole simulators. (The second option makes
  mypyc 2.4's type slot call ``__init__`` when Python constructs the object: with
  ``serializable`` alone the constructor skips it.) mypy (and so mypyc) sees ``mypy_extensions.mypyc_attr``; at run
  time, when ``mypy_extensions`` is not installed, the name is an identity decorator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

_C = TypeVar("_C", bound=type)

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:
    def mypyc_attr(*args, **kwargs):
        """mypyc's class options (read by the compiler); at run time an identity decorator."""
        return lambda cls: cls


def interpreted(cls: _C) -> _C:
    """Return ``cls`` unchanged (compiled modules keep a class so marked a Python class)."""
    return cls
