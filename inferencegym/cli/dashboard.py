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

from inferencegym.apps.process_group import group_alive


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
    """Stop a server from :func:`start_dashboard` and every process of its process group (the
    workers it forked may outlive the leader): SIGTERM, then SIGKILL after ``timeout_s``."""
    import signal

    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc.poll()  # reap the leader, or a zombie keeps the group "alive"
        if not group_alive(pgid):
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc.poll()
            if not group_alive(pgid):
                return
            time.sleep(0.1)


def serve_until_signalled(cmd: list[str]) -> int:
    """Run ``cmd`` in its own process group until it exits or this process gets SIGTERM, SIGINT or
    SIGHUP; on a signal the whole group (the server and every worker it forked) is terminated
    (SIGKILL after 20 s) before returning, so no server process outlives the command.

    Returns the server's exit code, or 0 when stopped by a signal."""
    import signal

    stopping: list[int] = []
    procs: list[subprocess.Popen] = []

    def _forward(signum: int, _frame: object) -> None:  # no waiting inside the handler
        stopping.append(signum)
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    previous = {s: signal.signal(s, _forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    proc = subprocess.Popen(cmd, env={**os.environ}, start_new_session=True)
    procs.append(proc)
    if stopping:  # signalled while the server was being started
        _forward(stopping[0], None)
    try:
        code = proc.wait()
    finally:
        stop_dashboard(proc)  # leftovers (forked workers), also when the server exited by itself
        for s, h in previous.items():
            signal.signal(s, h)
    return 0 if stopping else int(code)


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

        Example: inferencegym dashboard --port 5000, then open the printed link
        (http://127.0.0.1:5000/#/experiments?workflowType=machine_learning: the experiments and runs).
        """
        from rich.console import Console

        from inferencegym.tracking import tracking_uri, ui_url  # lazy: imports MLflow (~4.5 s); not at start-up

        uri = store or tracking_uri()
        console = Console()
        console.print(f"MLflow UI for [bold]{uri}[/bold] at {ui_url(f'http://{host}:{port}')} (Ctrl-C to stop)")
        code = serve_until_signalled(dashboard_command(store_uri=uri, host=host, port=port, workers=workers))
        raise typer.Exit(code)
