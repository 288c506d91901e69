"""OpenEnv-compatible HTTP server, web page and Python clients of InferenceGym.

``build_app()`` (in :mod:`inferencegym.apps.env_server.app`) makes the FastAPI app; the clients live in
:mod:`inferencegym.apps.env_server.client`. Imports are lazy so ``import inferencegym.apps.env_server`` stays cheap.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("build_app", "main"):
        from inferencegym.apps.env_server import (
            app as _app,  # lazy: imports Ray / torch (~5 s); not at start-up
        )

        return getattr(_app, name)
    if name in ("InferenceGymClient", "InferenceGymEnv", "InferenceGymHTTPError"):
        from inferencegym.apps.env_server import (
            client as _client,  # lazy: imports Ray / torch (~5 s); not at start-up
        )

        return getattr(_client, name)
    raise AttributeError(f"module 'inferencegym.apps.env_server' has no attribute {name!r}")


__all__ = ["build_app", "main", "InferenceGymClient", "InferenceGymEnv", "InferenceGymHTTPError"]
