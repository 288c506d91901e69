"""One strict JSON reader for every request body and every WebSocket frame both servers accept.

``json.loads`` accepts things the rest of the stack cannot handle: a string holding a lone UTF-16
surrogate (``"\\ud800"`` is valid JSON, but such a string cannot be encoded to UTF-8, so echoing it
back, logging it or storing it as an episode id fails later, far from the request), and nesting deep
enough to exhaust the recursion limit (a ``RecursionError`` deep inside a parser or validator). This
module refuses both up front with a one-line reason, so each request either is clean JSON or gets a
4xx before any route sees it. :func:`scrub` makes any string safe to echo (surrogates escaped,
length capped).

The checks are cheap on the honest path: a lone surrogate can only arrive as a ``\\uD8xx``-``\\uDFxx``
escape (raw surrogate bytes are not UTF-8 and fail decoding), and nesting is counted over the
bracket characters only, so a plain body costs two regex scans besides ``json.loads``.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays/objects accepted (the deepest legitimate body, a batch of Dict
observations, nests 4 levels)."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class JSONGuardError(ValueError):
    """A body or frame that is not clean JSON (answered 400/422, or an error frame)."""

    def __init__(self, message: str, *, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def _has_lone_surrogate(s: str) -> bool:
    if s.isascii():
        return False
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _find_lone_surrogate(value: Any, depth: int = 0) -> str | None:
    """The JSON path of the first string (key or value) holding a lone surrogate, or None."""
    if isinstance(value, str):
        return "" if _has_lone_surrogate(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            if _has_lone_surrogate(k):
                return f".{scrub(k, 32)}"
            sub = _find_lone_surrogate(v, depth + 1)
            if sub is not None:
                return f".{scrub(k, 32)}{sub}"
    elif isinstance(value, list):
        for i, v in enumerate(value):
            sub = _find_lone_surrogate(v, depth + 1)
            if sub is not None:
                return f"[{i}]{sub}"
    return None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def nesting_depth(value: Any) -> int:
    """Deepest array/object nesting of a parsed JSON value (a scalar is 0), without recursion.

    Lists of scalars (the bulk of an observation batch) are skipped with one ``map(type, ...)``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        d += 1
        deepest = max(deepest, d)
        if set(map(type, children)) <= _SCALARS:
            continue
        stack.extend((c, d) for c in children if isinstance(c, (dict, list)))
    return deepest


def parse_json(raw: bytes | str, *, max_depth: int = MAX_JSON_DEPTH, what: str = "body") -> Any:
    """``raw`` parsed as JSON, or :class:`JSONGuardError` with a one-line reason.

    Refused: bytes that are not UTF-8, text that is not JSON, nesting deeper than ``max_depth``,
    and any string (key or value) holding a lone UTF-16 surrogate."""
    if isinstance(raw, str):
        try:
            data = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise JSONGuardError(f"the {what} holds a lone UTF-16 surrogate; send valid UTF-8") from None
    else:
        data = bytes(raw)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONGuardError(f"the {what} is not valid UTF-8 (byte {exc.start}); send UTF-8 JSON",
                             status=400) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JSONGuardError(f"the {what} is not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
    except RecursionError:  # the C parser stops at the interpreter's recursion limit (~1000)
        raise JSONGuardError(f"the {what} nests deeper than {max_depth} levels; send a flatter "
                             f"JSON value") from None
    if data.count(b"[") + data.count(b"{") > max_depth and (deep := nesting_depth(value)) > max_depth:
        raise JSONGuardError(f"the {what} nests {deep} levels deep (at most {max_depth}); "
                             f"send a flatter JSON value")
    if _SURROGATE_ESCAPE.search(data):
        where = _find_lone_surrogate(value)
        if where is not None:
            raise JSONGuardError(f"the {what} holds a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF "
                                 f"escape) at {what}{where}; strings must be valid Unicode")
    return value


def scrub(s: str, max_chars: int = 80) -> str:
    """``s`` made safe to echo: lone surrogates written as ``\\udXXX`` text, cut to ``max_chars``."""
    n = len(s)
    s = s[:max_chars]
    if not s.isascii():
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")[:max_chars]
    return s if n <= max_chars else s + f"... ({n} chars)"


def scrub_all(x: Any) -> Any:
    """Every string (and key) in a JSON-like value made UTF-8-encodable (no truncation)."""
    if isinstance(x, str):
        return x if x.isascii() else x.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(x, dict):
        return {scrub_all(k) if isinstance(k, str) else k: scrub_all(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [scrub_all(v) for v in x]
    return x





class JSONBodyGuardMiddleware:
    """Pure ASGI: a JSON request body (``Content-Type`` JSON, or none) is read, checked with
    :func:`parse_json` and handed on unchanged; a body that fails gets a 4xx with one line.

    Install it inside the body-size limit, which bounds what is buffered here."""

    def __init__(self, app: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.app = app
        self.max_depth = int(max_depth)

    @staticmethod
    def _is_json(scope: dict) -> bool:
        if scope.get("method") not in ("POST", "PUT", "PATCH", "DELETE"):
            return False
        for name, value in scope.get("headers", ()):
            if name == b"content-type":
                ctype = value.split(b";", 1)[0].strip().lower()
                return ctype == b"application/json" or ctype.endswith(b"+json")
        return True  # FastAPI reads a body without a Content-Type as JSON

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self._is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body.strip():
            try:
                parse_json(body, max_depth=self.max_depth)
            except JSONGuardError as exc:
                await _send_json(send, exc.status, {"detail": {"error": str(exc)}})
                return
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}],
                                      receive), send)


def _replay(messages: list[dict], receive: Any) -> Any:
    pending = list(messages)

    async def replay_receive() -> dict:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay_receive


async def _send_json(send: Any, status: int, content: Any) -> None:
    body = json.dumps(scrub_all(content), ensure_ascii=False, allow_nan=False).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

__all__ = ["JSONGuardError", "JSONBodyGuardMiddleware", "MAX_JSON_DEPTH", "parse_json", "nesting_depth",
           "scrub", "scrub_all"]
