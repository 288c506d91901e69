"""What both HTTP faces (the OpenEnv server and the Ray Serve policy endpoint) put in front of their
routes: a body-size limit, a strict JSON reader (no lone surrogates, bounded nesting), the same
limits on every WebSocket frame, a Host-header check, optional API-key auth, JSON-safe 4xx handlers,
Prometheus metrics and an access log without credentials.

Everything here is pure ASGI or a FastAPI hook, so it works the same under uvicorn and under Ray
Serve's FastAPI ingress. The limits' defaults and where each is set are listed in
docs/threat_model.md.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from inferencegym.apps.json_guard import MAX_JSON_DEPTH, JSONBodyGuardMiddleware, scrub, scrub_all
from inferencegym.apps.peers import Network, parse_proxies, trusted_proxies_from_env
from inferencegym.apps.ws_guard import FrameValidator, WebSocketGuard

API_KEY_ENV = "INFERENCEGYM_API_KEY"
"""Environment variable holding the API key; when it is set, every route but the health checks
needs ``Authorization: Bearer <key>`` (or ``X-API-Key: <key>``). The key is never a CLI flag or a
config value, so it cannot leak into shell history, process lists or logs."""
ALLOWED_HOSTS_ENV = "INFERENCEGYM_ALLOWED_HOSTS"
"""Comma-separated Host-header names accepted (``*`` = any), overriding the default."""
DEFAULT_ALLOWED_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost", "::1", "[::1]")
OPEN_PATHS: frozenset[str] = frozenset({"/health", "/healthz"})
"""Routes answered without the API key (liveness probes)."""
MAX_ECHO_CHARS = 80
"""A rejected input is echoed back at most this long (never a large body)."""


@dataclass(frozen=True, kw_only=True)
class HTTPLimits:
    """Protections of one HTTP app (see docs/threat_model.md)."""

    max_body_bytes: int = 1_000_000
    """Largest request body in bytes; a larger one is answered 413 while it streams in."""
    allowed_hosts: tuple[str, ...] = field(default_factory=lambda: allowed_hosts_from_env())
    """Host-header names accepted (DNS-rebinding guard); ``("*",)`` accepts any."""
    api_key_env: str = API_KEY_ENV
    """Environment variable read for the API key (unset or empty: no auth)."""
    metrics: bool = True
    """Serve Prometheus metrics at ``GET /metrics``."""
    trusted_proxies: tuple[str, ...] = field(default_factory=lambda: trusted_proxies_from_env())
    """Proxy addresses / CIDR networks whose ``X-Forwarded-For`` (``X-Real-IP``, ``Forwarded``) is
    believed for the per-client limits (default none; env ``INFERENCEGYM_TRUSTED_PROXIES``)."""
    max_json_depth: int = MAX_JSON_DEPTH
    """Deepest array/object nesting of a request body or WebSocket frame (422 / error frame)."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_body_bytes <= 1 << 30:
            raise ValueError(f"max_body_bytes must be in [1, 2**30], got {self.max_body_bytes}")
        if not self.allowed_hosts:
            raise ValueError("allowed_hosts is empty: give at least one host name, or '*' for any")
        if not 2 <= self.max_json_depth <= 512:
            raise ValueError(f"max_json_depth must be in [2, 512], got {self.max_json_depth}")
        parse_proxies(self.trusted_proxies)  # a bad entry is a one-line ValueError here

    @property
    def proxy_networks(self) -> tuple[Network, ...]:
        return parse_proxies(self.trusted_proxies)


def allowed_hosts_from_env() -> tuple[str, ...]:
    raw = os.environ.get(ALLOWED_HOSTS_ENV, "").strip()
    if not raw:
        return DEFAULT_ALLOWED_HOSTS
    return tuple(h.strip() for h in raw.split(",") if h.strip())


# ---------------------------------------------------------------------------------------------
class BodyTooLargeError(StarletteHTTPException):
    """Raised from ``receive`` when the body passes the limit (answered 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail={
            "error": f"request body larger than {limit} bytes; send less (e.g. split a batch)",
            "max_body_bytes": limit})


def _json_response(status: int, content: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=content, headers=headers)


class BodySizeLimitMiddleware:
    """Pure ASGI: refuse bodies over ``max_body_bytes`` with 413.

    A declared ``Content-Length`` over the limit is refused before anything is read; otherwise the
    bytes are counted as they stream in (chunked uploads, lying headers) and reading stops at the
    limit."""

    def __init__(self, app: Any, max_body_bytes: int) -> None:
        self.app = app
        self.limit = int(max_body_bytes)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > self.limit:
                    msg = (BodyTooLargeError(self.limit).detail if declared > self.limit
                           else {"error": "invalid Content-Length header"})
                    await _json_response(413 if declared > self.limit else 400,
                                         {"detail": msg}, {"Connection": "close"})(scope, receive, send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLargeError(self.limit)
            return message

        async def tracking_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLargeError as exc:
            if started:
                raise
            await _json_response(413, {"detail": exc.detail}, {"Connection": "close"})(scope, receive, send)


class APIKeyMiddleware:
    """Pure ASGI: when a key is configured, every route except :data:`OPEN_PATHS` needs it."""

    def __init__(self, app: Any, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
            elif name == b"x-api-key":
                given = value.strip()
        if hmac.compare_digest(given, self.key):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await _json_response(401, {"detail": {"error": "missing or wrong API key: send "
                                               "'Authorization: Bearer <key>' (the key the server "
                                               f"reads from ${API_KEY_ENV})"}},
                             {"WWW-Authenticate": "Bearer"})(scope, receive, send)


# ---------------------------------------------------------------------------------------------
def json_safe(x: Any, *, max_chars: int = MAX_ECHO_CHARS) -> Any:
    """A value that ``json.dumps(allow_nan=False)`` accepts and that is never large: non-finite
    floats become the strings ``"NaN"``/``"Infinity"``/``"-Infinity"``, long strings, huge integers
    and large containers are cut to a short description."""
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, float):
        if math.isfinite(x):
            return x
        return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
    if isinstance(x, int):
        if abs(x) < 10**18:
            return x
        return f"<integer with {len(str(abs(x)))} digits>"
    if isinstance(x, str):
        return scrub(x, max_chars)  # cut, and lone surrogates written out (never unencodable)
    if isinstance(x, (bytes, bytearray)):
        return f"<{len(x)} bytes>"
    if isinstance(x, dict):
        if len(x) > 16:
            return f"<object with {len(x)} keys>"
        return {scrub(str(k), max_chars): json_safe(v, max_chars=max_chars) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        if len(x) > 16:
            return f"<array of {len(x)} items>"
        return [json_safe(v, max_chars=max_chars) for v in x]
    return json_safe(str(x), max_chars=max_chars)


async def validation_error_handler(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with each field's location, the reason and a short, JSON-safe echo of the given value
    (FastAPI's own handler fails on NaN/inf and echoes whole inputs)."""
    errors = []
    for e in exc.errors()[:20]:
        item = {"loc": json_safe(list(e.get("loc", ())), max_chars=64),
                "msg": scrub(str(e.get("msg", "")), 200), "type": scrub(str(e.get("type", "")), 64)}
        if "input" in e:
            item["input"] = json_safe(e["input"])
        errors.append(item)
    return JSONResponse(status_code=422, content={"detail": errors})


async def http_exception_handler(request: Request, exc: StarletteHTTPException) -> Any:
    """Starlette's handler, with every string of ``detail`` made encodable (a route's message may
    quote client input)."""
    from fastapi.responses import Response

    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=getattr(exc, "headers", None))
    return JSONResponse(status_code=exc.status_code, content={"detail": scrub_all(exc.detail)},
                        headers=getattr(exc, "headers", None))


# ---------------------------------------------------------------------------------------------
_REDACT = (re.compile(r"(session_id=)[^&\s\"]+"), re.compile(r"(/sessions/)[^/?\s\"]+"))


class RedactSessionIds(logging.Filter):
    """Remove session ids (the only credential of a session) from access-log lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self._redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.msg, str):
            record.msg = self._redact(record.msg)
        return True

    @staticmethod
    def _redact(s: str) -> str:
        for pat in _REDACT:
            s = pat.sub(r"\1<redacted>", s)
        return s


def install_access_log_redaction(logger_name: str = "uvicorn.access") -> None:
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RedactSessionIds) for f in logger.filters):
        logger.addFilter(RedactSessionIds())


# ---------------------------------------------------------------------------------------------
class MetricsMiddleware:
    """Pure ASGI: request count and latency per route template (never per raw path: bounded labels)."""

    def __init__(self, app: Any, requests: Any, latency: Any) -> None:
        self.app, self.requests, self.latency = app, requests, latency

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.requests.labels(scope.get("method", "?"), path, str(status["code"])).inc()
            self.latency.labels(path).observe(time.perf_counter() - t0)


def metrics_registry(prefix: str) -> tuple[Any, Any, Any]:
    """A private registry (one per app, so several apps in one process never collide) with the
    request counter and latency histogram."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    reg = CollectorRegistry()
    requests = Counter(f"{prefix}_http_requests", "HTTP requests by method, route and status",
                       ["method", "route", "status"], registry=reg)
    latency = Histogram(f"{prefix}_http_request_duration_seconds", "HTTP request latency by route",
                        ["route"], registry=reg,
                        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
    return reg, requests, latency


def metrics_response(registry: Any) -> Any:
    from fastapi.responses import Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def harden_app(app: FastAPI, limits: HTTPLimits, *, metrics_prefix: str,
               ws_max_per_client: int = 32,
               ws_validators: dict[str, FrameValidator] | None = None) -> Any:
    """Install the handlers and middlewares on ``app``; returns the metrics registry (or None).

    Order, outermost first: Host check -> API key -> WebSocket guard -> body limit -> JSON guard ->
    metrics -> the app. ``ws_validators`` maps a WebSocket path to its frame check."""
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_exception_handler)
    registry = None
    if limits.metrics:
        registry, requests, latency = metrics_registry(metrics_prefix)
        app.add_middleware(MetricsMiddleware, requests=requests, latency=latency)
    app.add_middleware(JSONBodyGuardMiddleware, max_depth=limits.max_json_depth)
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=limits.max_body_bytes)
    app.add_middleware(WebSocketGuard, max_frame_bytes=limits.max_body_bytes,
                       max_per_client=ws_max_per_client, trusted=limits.proxy_networks,
                       validators=ws_validators, max_depth=limits.max_json_depth)
    key = os.environ.get(limits.api_key_env, "")
    if key:
        app.add_middleware(APIKeyMiddleware, key=key)
    if "*" not in limits.allowed_hosts:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(limits.allowed_hosts),
                           www_redirect=False)
    install_access_log_redaction()
    return registry


__all__ = ["HTTPLimits", "harden_app", "BodySizeLimitMiddleware", "APIKeyMiddleware",
           "MetricsMiddleware", "RedactSessionIds", "json_safe", "validation_error_handler",
           "metrics_response", "http_exception_handler", "API_KEY_ENV", "ALLOWED_HOSTS_ENV", "DEFAULT_ALLOWED_HOSTS"]
