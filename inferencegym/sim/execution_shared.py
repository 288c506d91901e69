"""Execution models shared by the clusters of one process (``ExecutionModel.shared_preset``).

An ``ExecutionModel``'s methods are pure memoised functions of its constructor inputs, so one
instance can serve every cluster built alike: an env's resets then start with warm decode
coefficients, token times, draft coefficients and one-chunk prefill memos, and a quantization
switch finds its tier already built. This module holds the memo: models by their constructor
arguments (compared by value), at most :data:`SHARED_MAX` of them.
"""

from __future__ import annotations

from typing import Any

SHARED_MAX = 64
"""At most this many shared models are kept (the memo starts afresh beyond it)."""

_SHARED: dict[tuple, Any] = {}
"""Shared models by their constructor arguments (``tuple(args.items())``)."""


def shared_model(cls: type, args: dict[str, Any]) -> Any:
    """The shared ``cls(**args)``: built on a miss and kept; unshared when an argument has no
    value hash. The model records its key (``_shared_key``), so that the models derived from it
    (``_replace``, ``with_quantization``) are shared too."""
    key = tuple(args.items())
    try:
        m = _SHARED.get(key)
    except TypeError:  # an argument without a value hash: not shared
        return cls(**args)
    if m is None:
        m = cls(**args)
        if len(_SHARED) >= SHARED_MAX:
            _SHARED.clear()
        m._shared_key = key
        _SHARED[key] = m
    return m
