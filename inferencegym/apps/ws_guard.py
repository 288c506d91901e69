"""The HTTP limits on the WebSocket channel: every frame is checked before the route sees it.

OpenEnv's SDK serves sessions on ``/ws`` (and JSON-RPC on ``/mcp``). Its loop reads a frame,
``json.loads`` it and dispatches on ``type``; a frame that is not an object (``[]``, ``null``), too
deep, too big, or holding a lone surrogate ended the session, and the frames skipped the HTTP body
limit and the request models' bounds. :class:`WebSocketGuard` (pure ASGI, outside the routes) gives
every frame the HTTP treatment:

* a frame over ``max_frame_bytes`` (the HTTP body limit) or a binary frame -> an error frame;
* a frame that :func:`~inferencegym.apps.json_guard.parse_json` refuses (not JSON, too deep, a lone
  surrogate) or that is not a JSON object -> an error frame;
* the route's own validator (the env server checks ``reset``/``step`` data against the same strict
  models as ``POST /reset`` and ``POST /step``) -> an error frame with its one-line reason;

and the session stays open: the refused frame is simply not delivered. A client address
(:func:`~inferencegym.apps.peers.client_key`) holds at most ``max_per_client`` sockets at once;
one more is accepted, told why in an error frame, and closed (code 1013, "try again later").

Error frames have OpenEnv's shape: ``{"type": "error", "data": {"message": ..., "code": ...}}``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from inferencegym.apps.json_guard import MAX_JSON_DEPTH, JSONGuardError, parse_json, scrub
from inferencegym.apps.peers import Network, client_key

FrameValidator = Callable[[dict[str, Any]], str | None]
"""Returns None for a frame the route may see, else the one-line reason to answer."""
TRY_AGAIN_LATER = 1013
REFUSE_TARPIT_S = 1.0
"""A socket over the per-client cap is closed this long after its error frame (a client that
reconnects at once then opens at most one socket per second per connection attempt in flight)."""


def error_frame(message: str, code: str) -> str:
    return json.dumps({"type": "error", "data": {"message": scrub(message, 400), "code": code}})


class WebSocketGuard:
    """Pure ASGI middleware (see the module docstring)."""

    def __init__(self, app: Any, *, max_frame_bytes: int, max_per_client: int,
                 trusted: tuple[Network, ...] = (), validators: Mapping[str, FrameValidator] | None = None,
                 max_depth: int = MAX_JSON_DEPTH) -> None:
        if max_per_client < 1:
            raise ValueError(f"max_per_client must be >= 1, got {max_per_client}")
        self.app = app
        self.max_frame_bytes = int(max_frame_bytes)
        self.max_per_client = int(max_per_client)
        self.trusted = trusted
        self.validators = dict(validators or {})
        self.max_depth = int(max_depth)
        self.open: Counter[str] = Counter()
        """Open sockets per client key (one event loop: no lock needed)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        key = client_key(scope, self.trusted)
        if self.open[key] >= self.max_per_client:
            await self._refuse(receive, send, f"per-client WebSocket limit reached: this client holds "
                                              f"{self.open[key]} sockets (max {self.max_per_client}); "
                                              f"close one or reuse it (send another reset)")
            return
        self.open[key] += 1
        try:
            await self.app(scope, self._guarded(scope, receive, send), send)
        finally:
            self.open[key] -= 1
            if self.open[key] <= 0:
                del self.open[key]

    async def _refuse(self, receive: Any, send: Any, reason: str) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": error_frame(reason, "CAPACITY_REACHED")})
        await asyncio.sleep(REFUSE_TARPIT_S)
        await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})

    def _guarded(self, scope: dict, receive: Any, send: Any) -> Any:
        validate = self.validators.get(scope.get("path", ""))

        async def guarded_receive() -> dict:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                reason, code = self.check(message, validate)
                if reason is None:
                    return message
                await send({"type": "websocket.send", "text": error_frame(reason, code)})

        return guarded_receive

    def check(self, message: dict, validate: FrameValidator | None) -> tuple[str | None, str]:
        """(None, "") for a frame to deliver, else (reason, OpenEnv error code)."""
        text = message.get("text")
        if text is None:
            size = len(message.get("bytes") or b"")
            return (f"binary frame of {size} bytes refused: send JSON text frames", "INVALID_JSON")
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if size > self.max_frame_bytes:
            return (f"frame of {size} bytes exceeds the limit of {self.max_frame_bytes} bytes; "
                    f"send less", "VALIDATION_ERROR")
        try:
            value = parse_json(text, max_depth=self.max_depth, what="frame")
        except JSONGuardError as exc:
            return str(exc), "INVALID_JSON"
        if not isinstance(value, dict):
            return (f"a frame must be a JSON object like {{\"type\": \"step\", \"data\": {{...}}}}, "
                    f"got {_kind(value)}", "VALIDATION_ERROR")
        if validate is not None:
            reason = validate(value)
            if reason is not None:
                return reason, "VALIDATION_ERROR"
        return None, ""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


__all__ = ["WebSocketGuard", "FrameValidator", "error_frame", "TRY_AGAIN_LATER"]
