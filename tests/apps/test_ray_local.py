"""``python -m inferencegym.apps.ray_local``: every listener of every node on an explicit free port
(so a second local Ray cannot collide), and clear one-line errors. No Ray is started here; the
two-node job itself is tests/rl/test_rl_ray_job.py."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from inferencegym.apps import ray_local as rl


def test_head_and_worker_commands_set_every_port_explicitly():
    ports = dict(zip(rl.HEAD_PORT_FLAGS + rl.NODE_PORT_FLAGS, rl.free_ports(9), strict=True))
    assert len(set(ports.values())) == 9
    head = rl.head_command(ports, num_cpus=2, temp_dir="/tmp/x")
    for flag in ("--port", "--dashboard-port", "--ray-client-server-port", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port",
                 "--node-manager-port", "--object-manager-port"):
        assert f"{flag}={ports[flag]}" in head, flag
    assert "--head" in head and "--block" in head and "--dashboard-host=127.0.0.1" in head
    wports = dict(zip(rl.NODE_PORT_FLAGS, rl.free_ports(6), strict=True))
    worker = rl.worker_command("127.0.0.1:6380", wports, num_cpus=1, temp_dir="/tmp/y",
                               resources={"env_runner_node": 1})
    assert "--address=127.0.0.1:6380" in worker and '--resources={"env_runner_node": 1}' in worker
    assert all(f"{flag}={wports[flag]}" in worker for flag in rl.NODE_PORT_FLAGS)
    # loopback for one node; several nodes cannot be (docs/training.md), so the switch is on for them
    assert rl.node_env()["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert rl.node_env(multi_node=True)["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1"


def test_cli_errors_are_one_line_and_down_without_a_cluster_is_a_no_op(tmp_path):
    runner = CliRunner()
    state = tmp_path / "s.json"
    bad = runner.invoke(rl.app, ["up", "--worker-resources", "[1, 2]", "--state", str(state)])
    assert bad.exit_code == 2 and "expects a JSON object" in bad.output and "Traceback" not in bad.output
    assert not state.exists()
    missing = runner.invoke(rl.app, ["address", "--state", str(state)])
    assert missing.exit_code == 2 and "no cluster recorded" in missing.output
    assert runner.invoke(rl.app, ["down", "--state", str(state)]).exit_code == 0
    state.write_text(json.dumps({"address": "http://127.0.0.1:1"}))
    again = runner.invoke(rl.app, ["up", "--state", str(state)])
    assert again.exit_code == 2 and "a cluster is up" in again.output
    assert runner.invoke(rl.app, ["address", "--state", str(state)]).output.strip() == "http://127.0.0.1:1"
