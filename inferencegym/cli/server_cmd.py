"""``inferencegym server``: the OpenEnv-compatible HTTP server with the web page at /web."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("server")
    def server(
        host: str = typer.Option("127.0.0.1", help="interface to bind (127.0.0.1 = this machine only)"),
        port: int = typer.Option(7860, min=1, max=65535, help="TCP port"),
        max_sessions: int = typer.Option(64, min=1, max=10_000, help="live HTTP sessions at most (429 beyond)"),
        max_sessions_per_client: int = typer.Option(None, min=1, max=10_000,
                                                    help="sessions one client address may hold "
                                                         "[half of --max-sessions]"),
        idle_timeout_s: float = typer.Option(600.0, min=1.0, max=86_400.0, help="close sessions idle this long"),
        max_body_bytes: int = typer.Option(1_000_000, min=1_000, max=1 << 30,
                                           help="largest request body (413 beyond)"),
    ) -> None:
        """Serve the single-agent tasks over OpenEnv's HTTP/WebSocket protocol (web page at /web)."""
        import uvicorn

        from inferencegym.apps.env_server.app import build_app, uvicorn_options  # lazy: ~9 s
        from inferencegym.apps.http_security import HTTPLimits  # lazy: FastAPI (~0.6 s)

        if max_sessions_per_client is not None and max_sessions_per_client > max_sessions:
            raise typer.BadParameter(f"--max-sessions-per-client ({max_sessions_per_client}) exceeds "
                                     f"--max-sessions ({max_sessions})")
        limits = HTTPLimits(max_body_bytes=max_body_bytes)
        app = build_app(max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                        max_sessions_per_client=max_sessions_per_client, limits=limits)
        typer.echo(f"InferenceGym OpenEnv server on http://{host}:{port} (web page: /web, API docs: /docs)")
        uvicorn.run(app, host=host, port=port, log_level="info", **uvicorn_options(limits))
