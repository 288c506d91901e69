"""``inferencegym server``: the OpenEnv-compatible HTTP server with the web page at /web."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("server")
    def server(
        host: str = typer.Option("127.0.0.1", help="interface to bind (127.0.0.1 = this machine only)"),
        port: int = typer.Option(7860, min=1, max=65535, help="TCP port"),
        max_sessions: int = typer.Option(64, min=1, help="live HTTP sessions at most (429 beyond)"),
        idle_timeout_s: float = typer.Option(600.0, min=1.0, help="close sessions idle this long"),
    ) -> None:
        """Serve the single-agent tasks over OpenEnv's HTTP/WebSocket protocol (web page at /web)."""
        import uvicorn

        from inferencegym.apps.env_server.app import (
            build_app,  # lazy: imports Ray / torch (~5 s); not at start-up
        )

        typer.echo(f"InferenceGym OpenEnv server on http://{host}:{port} (web page: /web, API docs: /docs)")
        uvicorn.run(build_app(max_sessions=max_sessions, idle_timeout_s=idle_timeout_s),
                    host=host, port=port, log_level="info")
