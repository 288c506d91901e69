"""``inferencegym dashboard``: the MLflow server on 127.0.0.1 over the project's store; runs (with the
tags a reviewer needs) are read back through MLflow's REST API."""

from __future__ import annotations

import socket

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dashboard_serves_runs_over_rest(tmp_path, monkeypatch):
    import httpx
    import mlflow

    from inferencegym.cli.dashboard import dashboard_command, start_dashboard, stop_dashboard
    from inferencegym.tracking import log_evaluation_run, tracking_uri

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # artifacts of the runs logged below stay in tmp_path
    assert tracking_uri() == uri
    report = tmp_path / "report.md"
    report.write_text("# report\n")
    row = {"policy": "heuristic", "task": "bursty_workload", "episodes": 2, "seeds": [1000, 1001],
           "score_mean": 0.61, "score_ci95": 0.02, "ttft_p99_s": 0.8}
    run_id = log_evaluation_run(row, params={"seed": 1000, "episodes": 2}, artifacts=[report])

    cmd = dashboard_command(store_uri=uri, port=1234)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"  # loopback unless told otherwise

    port = _free_port()
    # generous wait: the server imports for ~10 s idle and over a minute on a loaded 2-core box
    proc = start_dashboard(store_uri=uri, port=port, log_path=str(tmp_path / "server.log"), wait_s=240)
    try:
        base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
        exps = httpx.post(f"{base}/experiments/search", json={"max_results": 100}).json()["experiments"]
        exp_ids = [e["experiment_id"] for e in exps if e["name"] == "evaluate"]
        assert exp_ids, exps
        runs = httpx.post(f"{base}/runs/search", json={"experiment_ids": exp_ids}).json()["runs"]
        assert [r["info"]["run_id"] for r in runs] == [run_id]
        tags = {t["key"]: t["value"] for t in runs[0]["data"]["tags"]}
        for key in ("task", "policy", "seed", "git_commit"):
            assert key in tags
        assert tags["task"] == "bursty_workload" and tags["policy"] == "heuristic"
        metrics = {m["key"]: m["value"] for m in runs[0]["data"]["metrics"]}
        assert metrics["score_mean"] == pytest.approx(0.61)
        arts = httpx.get(f"{base}/artifacts/list", params={"run_id": run_id}).json()
        assert "report.md" in [f["path"] for f in arts.get("files", [])]
        # the UI itself is served too
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 200
    finally:
        stop_dashboard(proc)
    assert proc.poll() is not None
    mlflow.set_tracking_uri(uri)  # the store is still readable after the server stops
    assert mlflow.get_run(run_id).info.status == "FINISHED"


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc; session changes do not hide them)."""
    from pathlib import Path

    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_dashboard_command_stopped_by_sigterm_leaves_no_server_process(tmp_path):
    """``inferencegym dashboard`` killed with SIGTERM (a service manager, ``kill``; Ctrl-C takes the
    same path) stops the MLflow server and every worker it forked: none survives, the port is free."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import httpx

    repo = Path(__file__).resolve().parents[2]
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "inferencegym.cli", "dashboard", "--port", str(port),
                             "--store", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240  # the server imports for ~10 s idle, a minute when busy
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "dashboard did not answer /health"
            time.sleep(0.5)
        server = _descendants(proc.pid)
        assert server, "the dashboard runs the MLflow server as a child process"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0
        out = proc.stdout.read().decode()
        assert "#/experiments?workflowType=machine_learning" in out  # the link opens on the runs pages
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in server) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in server if _alive(p)], "MLflow server processes outlived the dashboard"
        with socket.socket() as s:  # the port is free again
            s.bind(("127.0.0.1", port))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in _descendants(proc.pid):
            os.kill(p, signal.SIGKILL)
