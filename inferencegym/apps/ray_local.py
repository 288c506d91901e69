"""A Ray cluster of several nodes on this machine, on ports that cannot collide with another Ray.

``ray start --head`` with Ray's default ports fails (or, worse, half-starts) whenever another local Ray
already holds one of them: the GCS port 6379, the dashboard 8265, or the dashboard agent's 52365,
which a second Ray on the same machine always collides on. This tool picks a free port for every
listener of every node (GCS, dashboard, client server, dashboard agent HTTP and gRPC, runtime-env
agent, metrics, node manager, object manager), starts the head and any worker nodes with
``ray start --block`` each in its own process group and temp dir, and records them in a state file,
so that ``down`` stops exactly the processes ``up`` started (never another user's Ray, unlike a bare
``ray stop``)::

    python -m inferencegym.apps.ray_local up --workers 1 --worker-resources '{"env_runner_node": 1}'
    export RAY_ADDRESS=$(python -m inferencegym.apps.ray_local address)   # http://127.0.0.1:<port>
    RAY_AUTH_MODE=token ray job submit --working-dir . -- python -m inferencegym.train ...
    python -m inferencegym.apps.ray_local down

Addresses: a single node (``--workers 0``) listens on 127.0.0.1 only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``,
see docs/cluster.md). Ray 2.60 cannot run several nodes on loopback: that switch refuses
``ray start --address``, and without it a joining node resolves 127.0.0.1 to the machine's address.
With worker nodes, the nodes therefore use the machine's address (Ray's token authentication, on by
default, guards them) and only the dashboard / job API stays on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import typer

from inferencegym.apps.process_group import group_alive

#: ``ray start`` port options of any node, and those only a head has.
NODE_PORT_FLAGS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
                   "--metrics-export-port", "--node-manager-port", "--object-manager-port")
HEAD_PORT_FLAGS = ("--port", "--dashboard-port", "--ray-client-server-port")
DEFAULT_STATE = ".ray_local.json"


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (all held open until all are chosen)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _ray_bin() -> str:
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


def node_env(multi_node: bool = False) -> dict[str, str]:
    """The environment of the ``ray start`` processes: no usage stats, one thread; loopback only for
    a single node (see the module docstring for why several nodes cannot be)."""
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1" if multi_node else "0",
           "RAY_USAGE_STATS_ENABLED": "0",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("RAY_ADDRESS", None)
    return env


def head_command(ports: dict[str, int], *, num_cpus: int, temp_dir: str,
                 resources: dict[str, float] | None = None) -> list[str]:
    """``ray start --head --block`` with every listener on the given port."""
    cmd = [_ray_bin(), "start", "--head", "--block", f"--num-cpus={num_cpus}", "--dashboard-host=127.0.0.1",
           f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    cmd += [f"{flag}={ports[flag]}" for flag in (*HEAD_PORT_FLAGS, *NODE_PORT_FLAGS)]
    if resources:
        cmd.append(f"--resources={json.dumps(resources)}")
    return cmd


def worker_command(gcs_address: str, ports: dict[str, int], *, num_cpus: int, temp_dir: str,
                   resources: dict[str, float] | None = None) -> list[str]:
    """``ray start --address <gcs> --block`` for one more node on this machine."""
    cmd = [_ray_bin(), "start", f"--address={gcs_address}", "--block", f"--num-cpus={num_cpus}",
           f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    cmd += [f"{flag}={ports[flag]}" for flag in NODE_PORT_FLAGS]
    if resources:
        cmd.append(f"--resources={json.dumps(resources)}")
    return cmd


def _spawn(cmd: list[str], log: Path, multi_node: bool) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=node_env(multi_node), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # its own group: `down` stops exactly it
    return proc.pid


def _wait_dashboard(url: str, pgid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            raise RuntimeError("the Ray head exited while starting; see its log")
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=2):
                return
        except OSError as exc:  # an HTTP error (auth) means the server answers
            if getattr(exc, "code", None):
                return
        time.sleep(1.0)
    raise TimeoutError(f"the Ray dashboard {url} did not answer within {timeout_s:.0f} s")


def _wait_nodes(state: dict[str, Any], n: int, timeout_s: float) -> None:
    """Wait until ``n`` nodes are alive (``ray list nodes`` through the dashboard)."""
    env = {**node_env(state.get("multi_node", False)), "RAY_AUTH_MODE": "token"}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run([_ray_bin(), "list", "nodes", "--address", state["address"], "--format", "json",
                              "--filter", "state=ALIVE"], env=env, capture_output=True, text=True, check=False)
        try:
            if out.returncode == 0 and len(json.loads(out.stdout)) >= n:
                return
        except json.JSONDecodeError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{n} Ray nodes did not come up within {timeout_s:.0f} s")


def up(*, workers: int = 0, head_cpus: int = 1, worker_cpus: int = 1, head_resources: dict | None = None,
       worker_resources: dict | None = None, timeout_s: float = 240.0) -> dict[str, Any]:
    """Start a head and ``workers`` worker nodes on free ports; returns the state (``down`` needs it)."""
    multi = workers > 0
    temp_dir = tempfile.mkdtemp(prefix="ig_ray_", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    head_ports = dict(zip(HEAD_PORT_FLAGS + NODE_PORT_FLAGS,
                          free_ports(len(HEAD_PORT_FLAGS) + len(NODE_PORT_FLAGS)), strict=True))
    state: dict[str, Any] = {"temp_dir": temp_dir, "pgids": [], "multi_node": multi,
                             "address": f"http://127.0.0.1:{head_ports['--dashboard-port']}",
                             # a joining node resolves 127.0.0.1 to the machine's address itself
                             "gcs_address": f"127.0.0.1:{head_ports['--port']}", "ports": [head_ports]}
    log = Path(temp_dir) / "ray_local.log"
    try:
        state["pgids"].append(_spawn(head_command(head_ports, num_cpus=head_cpus, temp_dir=temp_dir,
                                                  resources=head_resources), log, multi))
        _wait_dashboard(state["address"], state["pgids"][0], timeout_s)
        for _ in range(workers):
            ports = dict(zip(NODE_PORT_FLAGS, free_ports(len(NODE_PORT_FLAGS)), strict=True))
            state["ports"].append(ports)
            node_dir = Path(temp_dir) / f"w{len(state['pgids'])}"  # its own: each node's runtime-env agent
            node_dir.mkdir()                                        # cleans its runtime_resources at start
            state["pgids"].append(_spawn(worker_command(state["gcs_address"], ports, num_cpus=worker_cpus,
                                                        temp_dir=str(node_dir), resources=worker_resources),
                                         log, multi))
        _wait_nodes(state, 1 + workers, timeout_s)
    except BaseException:
        down(state)
        raise
    return state


def down(state: dict[str, Any], timeout_s: float = 60.0) -> None:
    """Stop the nodes of ``state`` (SIGTERM to each ``ray start --block`` group: Ray stops the processes
    it started; SIGKILL after ``timeout_s``), workers first, then remove the temp dir."""
    for pgid in reversed(state.get("pgids", [])):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not group_alive(pgid):
                break
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + timeout_s
            while group_alive(pgid) and time.monotonic() < deadline:
                try:  # reap it if it is our child (a test); else init does
                    os.waitpid(pgid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.2)
    shutil.rmtree(state.get("temp_dir", "/nonexistent"), ignore_errors=True)


app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


@app.command("up")
def up_cmd(
    workers: int = typer.Option(0, "--workers", min=0, help="worker nodes besides the head"),
    head_cpus: int = typer.Option(None, "--head-cpus", min=0,
                                  help="CPUs the head offers (default: the machine's, at least 2, without "
                                       "workers; 1 with workers)"),
    worker_cpus: int = typer.Option(1, "--worker-cpus", min=0, help="CPUs each worker node offers"),
    worker_resources: str = typer.Option("{}", "--worker-resources",
                                         help='custom resources of each worker node, JSON: {"env_runner_node": 1}'),
    state_file: Path = typer.Option(Path(DEFAULT_STATE), "--state", help="where the cluster is recorded"),
) -> None:
    """Start the head (and worker nodes) on free ports; prints the dashboard address for RAY_ADDRESS."""
    if state_file.exists():
        typer.echo(f"error: {state_file} exists: a cluster is up (stop it with `down --state {state_file}`)", err=True)
        raise typer.Exit(2)
    try:
        res = json.loads(worker_resources)
        if not isinstance(res, dict):
            raise ValueError
    except ValueError:
        typer.echo(f'error: --worker-resources expects a JSON object like {{"env_runner_node": 1}}; got '
                   f"{worker_resources[:80]!r}", err=True)
        raise typer.Exit(2) from None
    if head_cpus is None:
        head_cpus = 1 if workers else max(2, os.cpu_count() or 2)
    state = up(workers=workers, head_cpus=head_cpus, worker_cpus=worker_cpus, worker_resources=res or None)
    state_file.write_text(json.dumps(state, indent=1))
    typer.echo(state["address"])


@app.command("address")
def address_cmd(state_file: Path = typer.Option(Path(DEFAULT_STATE), "--state")) -> None:
    """Print the dashboard address (for RAY_ADDRESS / ray job submit --address)."""
    if not state_file.exists():
        typer.echo(f"error: no cluster recorded in {state_file}; start one with `up`", err=True)
        raise typer.Exit(2)
    typer.echo(json.loads(state_file.read_text())["address"])


@app.command("down")
def down_cmd(state_file: Path = typer.Option(Path(DEFAULT_STATE), "--state")) -> None:
    """Stop exactly the nodes `up` started (other Ray clusters on the machine are not touched)."""
    if not state_file.exists():
        typer.echo(f"no cluster recorded in {state_file}; nothing to stop")
        return
    down(json.loads(state_file.read_text()))
    state_file.unlink()


if __name__ == "__main__":
    app()
