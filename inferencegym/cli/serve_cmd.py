"""``inferencegym serve``: serve a trained policy over HTTP with Ray Serve."""

from __future__ import annotations

import typer

from inferencegym.cli.errors import fail, one_line


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_cmd(
        policy: str = typer.Option(..., "--policy", help="checkpoint:PATH or pretrained:TASK"),
        task: str = typer.Option(None, "--task", help="Task the policy is for (reported by /metadata; "
                                 "defaults to TASK for pretrained:TASK)."),
        port: int = typer.Option(8000, "--port", help="HTTP port of Serve's proxy."),
        host: str = typer.Option("127.0.0.1", "--host", help="Bind address. 127.0.0.1 unless you mean "
                                 "to expose the endpoint (then put auth in front of it)."),
        module_id: str = typer.Option(None, "--module-id", help="Module to serve when the checkpoint "
                                      "holds several (e.g. the router of a cluster checkpoint)."),
        max_batch_size: int = typer.Option(64, "--max-batch-size", min=1, max=1024, help="@serve.batch limit."),
        batch_wait_ms: float = typer.Option(2.0, "--batch-wait-ms", min=0.0, max=10_000.0,
                                            help="How long a batch waits to fill."),
        replicas: int = typer.Option(1, "--replicas", min=1, max=256, help="Serve replicas of the policy."),
    ) -> None:
        """Serve POST /act, GET /healthz and GET /metadata for POLICY until Ctrl-C.

        Example: inferencegym serve --policy pretrained:bursty_workload --port 8000, then
        inferencegym evaluate --policy http://127.0.0.1:8000 --task bursty_workload
        """
        import os

        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from rich.console import Console

        from inferencegym.apps.policy_endpoint.app import (  # lazy: imports Ray / torch (~5 s); not at start-up
            run_server,
            shutdown_server,
        )
        from inferencegym.apps.policy_endpoint.policy import (  # lazy: imports Ray / torch (~5 s); not at start-up
            ServedPolicy,  # lazy: imports Ray / torch (~5 s); not at start-up
        )

        console = Console(stderr=True)
        # Fail fast, before Ray starts, on a spec or checkpoint that cannot load.
        try:
            ServedPolicy.from_spec(policy, task_id=task, module_id=module_id)
        except (ValueError, FileNotFoundError) as exc:
            fail(one_line(exc))
        with console.status(f"starting Ray Serve on {host}:{port} ..."):
            run_server(policy, task_id=task, module_id=module_id, host=host, port=port,
                       max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_ms / 1000.0,
                       num_replicas=replicas, blocking=False)
        console.print(f"serving [bold]{policy}[/bold] at http://{host}:{port} "
                      f"(POST /act, GET /healthz, GET /metadata); Ctrl-C to stop")
        import signal
        import time

        def _stop(signum: int, frame: object) -> None:
            raise KeyboardInterrupt  # SIGTERM (docker stop, kill) shuts down like Ctrl-C

        signal.signal(signal.SIGTERM, _stop)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            shutdown_server()
