"""Run an ASGI app under uvicorn on 127.0.0.1 on a free port, in a background thread (tests only)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(app: Any, *, startup_timeout_s: float = 60.0, **uvicorn_options: Any) -> Iterator[str]:
    """``with live_server(app) as url:`` -> ``http://127.0.0.1:<port>``; stopped on exit.

    ``uvicorn_options`` go to ``uvicorn.Config`` (e.g. the launchers' ``uvicorn_options()``);
    without them uvicorn's defaults apply, as for ``uvicorn module:app``."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                            **{"ws": "websockets-sansio", **uvicorn_options})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn exited during startup")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise TimeoutError(f"uvicorn did not start within {startup_timeout_s} s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
