"""Sweep files and the Tune sweep: validation without Ray, then one tiny real sweep with MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inferencegym.apps.tuning import SweepError, apply_params, load_sweep

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sweep", sorted((REPO / "tune").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_sweeps_load(sweep, monkeypatch):
    monkeypatch.chdir(REPO)
    spec, cfg = load_sweep(sweep)
    assert spec.space and spec.num_samples >= 2
    # every space dimension applies cleanly at its bounds / first choice
    params = {k: (d.choice[0] if d.choice else (d.uniform or d.loguniform or d.quniform or d.randint)[0])
              for k, d in spec.space.items()}
    out = apply_params(cfg, {**spec.overrides, **params})
    for k, v in params.items():
        group, _, name = k.partition(".")
        if group == "ppo":
            assert out.to_dict()["ppo"][name] == v
        else:
            key = "reward_config" if cfg.env == "single" else "reward"
            assert out.env_config[key][name] == v


def _write(tmp_path, **changes) -> Path:
    data = {"name": "t", "base_config": str(REPO / "rllib_configs" / "bursty_workload.yaml"),
            "space": {"reward.w_slo": {"uniform": [0.5, 2.0]}}}
    data.update(changes)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.mark.parametrize("changes,needle", [
    ({"space": {"reward.w_nope": {"uniform": [0, 1]}}}, "unknown reward field 'w_nope'"),
    ({"space": {"ppo.lrr": {"uniform": [0, 1]}}}, "unknown PPO setting 'lrr'"),
    ({"space": {"resources.num_env_runners": {"choice": [0, 1]}}}, "keys must start with 'reward.' or 'ppo.'"),
    ({"space": {"reward.w_slo": {"uniform": [2, 1]}}}, "low < high"),
    ({"space": {"reward.w_slo": {"uniform": [0, 1], "choice": [1]}}}, "exactly one"),
    ({"space": {"ppo.lr": {"loguniform": [0, 1]}}}, "low > 0"),
    ({"space": {}}, "space is empty"),
    ({"overrides": {"ppo.minibatch_size": 100000}}, "larger than train_batch_size_per_learner"),
    ({"overrides": {"resources.nope": 1}}, "unknown resources setting"),
    ({"scheduler": {"type": "hyperband"}}, "scheduler.type"),
    ({"colour": "red"}, "colour"),
])
def test_bad_sweep_files_are_refused_with_reason(tmp_path, changes, needle):
    with pytest.raises((SweepError, ValueError)) as exc:
        load_sweep(_write(tmp_path, **changes))
    assert needle in str(exc.value)


def test_apply_params_reward_and_ppo():
    from inferencegym.rl.config import load_config

    cfg = load_config(REPO / "rllib_configs" / "bursty_workload.yaml")
    base_reward = dict(cfg.env_config["reward_config"])  # the config's own (grade-aligned) reward
    assert base_reward["w_grade"] == 1.0 and base_reward["w_slo"] == 0.0
    out = apply_params(cfg, {"reward.w_slo": 2.5, "ppo.lr": 1e-4, "ppo.lambda": 0.9})
    assert out.env_config["reward_config"] == {**base_reward, "w_slo": 2.5}  # swept weight on top
    assert out.ppo.lr == 1e-4 and out.ppo.lambda_ == 0.9
    assert cfg.env_config["reward_config"] == base_reward and cfg.ppo.lambda_ == 0.95  # base untouched
    with pytest.raises(TypeError):
        apply_params(cfg, {"reward.w_slo_typo": 1.0})


def test_cli_refuses_bad_sweep_before_starting_ray(tmp_path):
    from typer.testing import CliRunner

    from inferencegym.cli import app

    res = CliRunner().invoke(app, ["tune", "--sweep", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2 and "not found" in " ".join(res.output.split())  # rich wraps lines
    bad = _write(tmp_path, space={"reward.w_nope": {"uniform": [0, 1]}})
    res = CliRunner().invoke(app, ["tune", "--sweep", str(bad)])
    assert res.exit_code == 2 and "unknown reward field 'w_nope'" in " ".join(res.output.split())  # rich wraps lines
