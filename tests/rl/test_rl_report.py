"""Reports (Markdown/HTML + PNG), MLflow evaluation runs and the pickle-free pretrained format."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferencegym.rl.report import load_records, read_progress, write_report


def _result_json(path, n=4):
    lines = []
    for i in range(1, n + 1):
        er = {"num_episodes": 1}
        if i > 1:  # keys that appear only after the first iteration (progress.csv would miss them)
            er.update({"episode_return_mean": -10.0 + i, "grade/score": 0.1 * i})
        lines.append(json.dumps({"training_iteration": i, "num_env_steps_sampled_lifetime": 512 * i,
                                 "time_total_s": 2.0 * i, "env_runners": er}))
    path.write_text("\n".join(lines) + "\n")


ROWS = [
    {"policy": "ppo (attention_router)", "task": "cluster_routing", "episodes": 3, "seeds": [1000, 1001, 1002],
     "score_mean": 0.9, "score_ci95": 0.05, "ttft_p99_s": 0.5, "ttft_p99_ci95": 0.1, "tbt_p99_s": 0.05,
     "e2e_p99_s": 4.0, "throughput_tok_s": 900.0},
    {"policy": "least_outstanding_requests", "task": "cluster_routing", "episodes": 3, "seeds": [1000, 1001, 1002],
     "score_mean": 0.95, "score_ci95": 0.02, "ttft_p99_s": 0.6, "tbt_p99_s": None, "e2e_p99_s": 4.2,
     "throughput_tok_s": 905.0},
]


def test_report_has_curves_table_and_plots(tmp_path):
    trial = tmp_path / "trial"
    trial.mkdir()
    _result_json(trial / "result.json")
    prog = read_progress(trial / "progress.csv")  # reads result.json next to it
    assert prog["env_runners/grade/score"][0] != prog["env_runners/grade/score"][0]  # NaN in iteration 1
    assert prog["env_runners/grade/score"][1:] == pytest.approx([0.2, 0.3, 0.4])
    rec = {"task": "cluster_routing", "name": "ppo_cluster_routing", "progress_csv": str(trial / "progress.csv"),
           "train": {"env_steps": 2048, "env_steps_per_s": 256.0}, "rows": ROWS, "command": "python x.py"}
    (tmp_path / "recs").mkdir()
    (tmp_path / "recs" / "a.json").write_text(json.dumps(rec))
    files = write_report(load_records(tmp_path / "recs"), tmp_path / "out")
    md = files["report.md"].read_text()
    assert "| ppo (attention_router) | 0.900 ± 0.050 | 0.500 ± 0.100 |" in md
    assert "| least_outstanding_requests | 0.950 ± 0.020 | 0.600 | - |" in md
    assert "seeds 1000..1002" in md and "`python x.py`" in md
    for png in ("ppo_cluster_routing_learning_curve.png", "ppo_cluster_routing_comparison.png"):
        data = (tmp_path / "out" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert "<table>" in files["report.html"].read_text()
    with pytest.raises(FileNotFoundError, match="no run records"):
        load_records(tmp_path / "empty_dir_that_does_not_exist")


def test_log_evaluation_run_tags_metrics_and_artifacts(tmp_path, monkeypatch):
    import mlflow

    from inferencegym.tracking import log_evaluation_run, tracking_uri

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert tracking_uri() == uri
    art = tmp_path / "plot.txt"
    art.write_text("x")
    run_id = log_evaluation_run(ROWS, params={"episodes": 3, "seed": 1000}, artifacts=[art])
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.data.tags["task"] == "cluster_routing"
    assert run.data.tags["policy"] == "least_outstanding_requests,ppo (attention_router)"
    assert run.data.tags["seed"] == "1000" and run.data.tags["git_commit"]
    assert run.data.metrics["least_outstanding_requests/cluster_routing/score_mean"] == 0.95
    assert run.data.params["episodes"] == "3"
    names = {a.path for a in mlflow.MlflowClient(tracking_uri=uri).list_artifacts(run_id)}
    assert {"plot.txt", "results.json"} <= names
    with pytest.raises(FileNotFoundError, match="does not exist"):
        log_evaluation_run(ROWS[0], artifacts=[tmp_path / "missing.png"])


def test_default_tracking_uri_is_sqlite_in_project_root(monkeypatch, tmp_path):
    from inferencegym.tracking import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "pyproject.toml").write_text("")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


def test_pretrained_export_roundtrip_on_real_cluster_env(tmp_path, monkeypatch):
    """export_module -> load_exported rebuilds the module from the task's env spaces and weights
    read with torch.load(weights_only=True); the greedy action respects the env's mask."""
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import inferencegym.rl.policy_loader as pl
    from inferencegym.envs.cluster_env import ClusterEnv
    from inferencegym.rl.modules import ReplicaAttentionRouter

    env = ClusterEnv({"task_id": "cluster_heterogeneous", "episode_windows": 2})
    torch.manual_seed(0)
    m = RLModuleSpec(module_class=ReplicaAttentionRouter, observation_space=env.observation_spaces["router"],
                     action_space=env.action_spaces["router"], model_config={"embed_dim": 16, "num_heads": 2}).build()
    pl.export_module(m, tmp_path / "cluster_heterogeneous", module_type="attention_router",
                     model_config={"embed_dim": 16, "num_heads": 2}, module_id="router_pol",
                     task_id="cluster_heterogeneous", kind="cluster", mapping={"router": "router_pol"})
    assert not list((tmp_path).rglob("*.pkl"))
    monkeypatch.setattr(pl, "PRETRAINED_DIR", tmp_path)
    assert pl.list_pretrained() == ["cluster_heterogeneous"]
    pol = pl.load_policy("pretrained:cluster_heterogeneous", "cluster_heterogeneous")
    obs, _ = env.reset(seed=3)
    for _ in range(30):
        if "router" in obs:
            o = obs["router"]
            a = pol.act(o)
            assert o["action_mask"][a] == 1.0
            ref = m.forward_inference({"obs": {k: torch.as_tensor(v)[None] for k, v in o.items()}})["action_dist_inputs"]
            assert a == int(np.argmax(ref.numpy()[0]))
            act = {"router": a}
        else:
            act = {aid: np.zeros(4, dtype=np.int64) for aid in obs}
        obs, *_ = env.step(act)
    with pytest.raises(ValueError, match="is a policy for task 'cluster_heterogeneous'"):
        pl.load_policy("pretrained:cluster_heterogeneous", "cluster_routing")
    with pytest.raises(ValueError, match="no pretrained policy for task 'cluster_routing'; available: cluster_heterogeneous"):
        pl.load_policy("pretrained:cluster_routing", "cluster_routing")
    with pytest.raises(ValueError, match="unknown policy scheme"):
        pl.load_policy("s3:bucket", "cluster_routing")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pl.load_policy(f"checkpoint:{tmp_path / 'nope'}", "cluster_routing")


def test_shipped_pretrained_policies_load_and_act():
    """Every module in inferencegym/data/pretrained loads for its task and acts on a real observation
    (catches an export that no longer matches the env's spaces)."""
    from inferencegym.rl.env_creators import make_cluster_env, make_single_env
    from inferencegym.rl.policy_loader import list_pretrained, load_policy

    shipped = list_pretrained()
    assert shipped, "no pretrained modules shipped in inferencegym/data/pretrained"
    for task in shipped:
        pol = load_policy(f"pretrained:{task}", task)
        if pol.kind == "control":  # a control-plane agent (issue 22): its features from a real state
            from inferencegym.envs.control_env import ControlEnv
            from inferencegym.rl.control import gateway_features
            from inferencegym.sim.gateway import GatewayState

            role = pol.meta["control"]["role"]
            if role == "autoscaler":
                env = ControlEnv(task, features=pol.meta["control"]["features"], episode_windows_override=1)
                obs, _ = env.reset(seed=0)
            else:
                obs = gateway_features(GatewayState(now_s=1.0, routable=6, queue=[0] * 6, kv=[0.1] * 6), 3.5, [20])
            a = pol.act(obs)
            assert 0 <= a < pol.module.action_space.n
        elif pol.kind == "cluster":
            env = make_cluster_env({"task_id": task, "episode_windows": 1})
            obs, _ = env.reset(seed=0)
            a = pol.act(obs["router"])
            assert obs["router"]["action_mask"][a] == 1.0
        else:
            env = make_single_env({"task_id": task, "episode_windows": 1})
            obs, _ = env.reset(seed=0)
            env.step(pol.act_flat(obs))  # a valid flat action for the wrapped env
            assert pol.act(obs) is not None
