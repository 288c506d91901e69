"""``inferencegym dashboard``: the MLflow UI on the project's tracking store, on 127.0.0.1.

Every training, sweep and evaluation run lands in the same store (``inferencegym.tracking
.tracking_uri()``: ``MLFLOW_TRACKING_URI`` or ``sqlite:///<project>/mlflow.db``); this command serves
it with ``mlflow server`` (UI + REST API) so a reviewer can compare runs by their tags (task, policy,
seed, git commit, sweep) and open their artifacts (reports, plots, checkpoints).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import typer


def dashboard_command(*, store_uri: str, host: str = "127.0.0.1", port: int = 5000,
                      workers: int = 1) -> list[str]:
    """The ``mlflow server`` command line for ``store_uri``."""
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store_uri,
            "--registry-store-uri", store_uri, "--host", host, "--port", str(int(port)),
            "--workers", str(int(workers))]


def start_dashboard(*, store_uri: str, host: str = "127.0.0.1", port: int = 5000, workers: int = 1,
                    wait_s: float = 60.0, log_path: str | None = None) -> subprocess.Popen:
    """Start the MLflow server in the background and wait until ``/health`` answers.

    Returns the process (the caller stops it with ``terminate()``). Raises RuntimeError with the
    server's output if it exits or does not answer within ``wait_s``."""
    import httpx

    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(dashboard_command(store_uri=store_uri, host=host, port=port, workers=workers),
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ},
                            start_new_session=True)  # own process group: stop_dashboard ends its workers too
    url = f"http://{host}:{port}/health"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = open(log_path).read()[-2000:] if log_path else "(no log kept)"
            raise RuntimeError(f"mlflow server exited with {proc.returncode}: {tail}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop_dashboard(proc)
    raise RuntimeError(f"mlflow server did not answer {url} within {wait_s:.0f} s")


def stop_dashboard(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    """Stop a server from :func:`start_dashboard` and its worker processes (its process group)."""
    import signal

    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
    except ProcessLookupError:
        pass


def register(app: typer.Typer) -> None:
    @app.command("dashboard")
    def dashboard(
        port: int = typer.Option(5000, "--port", help="Port of the MLflow UI."),
        host: str = typer.Option("127.0.0.1", "--host", help="Bind address (127.0.0.1 unless you mean "
                                 "to expose the UI; it has no authentication)."),
        store: str = typer.Option(None, "--store", help="Tracking store URI (default: the project's, "
                                  "MLFLOW_TRACKING_URI or sqlite:///<project>/mlflow.db)."),
        workers: int = typer.Option(1, "--workers", min=1, help="Server worker processes."),
    ) -> None:
        """Serve the MLflow UI for the project's runs until Ctrl-C.

        Example: inferencegym dashboard --port 5000, then open http://127.0.0.1:5000
        """
        from rich.console import Console

        from inferencegym.tracking import tracking_uri  # lazy: imports MLflow (~4.5 s); not at start-up

        uri = store or tracking_uri()
        console = Console()
        console.print(f"MLflow UI for [bold]{uri}[/bold] at http://{host}:{port} (Ctrl-C to stop)")
        try:
            subprocess.run(dashboard_command(store_uri=uri, host=host, port=port, workers=workers),
                           check=False)
        except KeyboardInterrupt:
            pass
