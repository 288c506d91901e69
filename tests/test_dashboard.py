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
