"""The server's error and JSON helpers: one shape for every refusal (``{"detail": {"error": ...}}``),
429 with ``Retry-After`` for a busy pool, and JSON-safe numbers."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from fastapi import HTTPException

from inferencegym.apps.env_server.limits import BUSY_TARPIT_S, BusyError


def err(status: int, msg: str, **extra: Any) -> HTTPException:
    return HTTPException(status_code=status, detail={"error": msg, **extra})


async def busy(exc: BusyError) -> HTTPException:
    """429 with ``Retry-After``, answered after :data:`BUSY_TARPIT_S`: a client that ignores
    ``Retry-After`` and asks again at once (a flood) is slowed to one request per connection per
    tarpit, at the cost of a sleeping coroutine (no thread, no CPU)."""
    await asyncio.sleep(BUSY_TARPIT_S)
    return HTTPException(status_code=429, detail={"error": str(exc)},
                         headers={"Retry-After": str(exc.retry_after_s)})


def finite(x: Any) -> Any:
    """JSON-safe numbers (NaN/inf -> None), recursively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x
