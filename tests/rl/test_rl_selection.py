"""The policy a training run returns is the best candidate on validation seeds, warm start included."""

from __future__ import annotations

import pytest

import inferencegym.rl.selection as sel


@pytest.fixture
def trial(tmp_path, monkeypatch):
    for i in (5, 10, 12):
        (tmp_path / "trial" / f"checkpoint_{i:06d}").mkdir(parents=True)
    (tmp_path / "trial" / "not_a_checkpoint").mkdir()
    (tmp_path / "bc" / "router_pol").mkdir(parents=True)
    scores: dict[str, float] = {}
    seen = []
    monkeypatch.setattr(sel, "load_checkpoint", lambda path, task_id: path.name)

    def fake_eval(policy, task_id, *, episodes, seed, name):
        seen.append((name, episodes, seed))
        return {"score_mean": scores[policy], "score_ci95": 0.0, "ttft_p99_s": 1.0}

    monkeypatch.setattr(sel, "evaluate_one", fake_eval)
    return tmp_path, scores, seen


def test_best_checkpoint_wins_on_validation_seeds(trial):
    tmp, scores, seen = trial
    scores.update(router_pol=0.70, checkpoint_000005=0.72, checkpoint_000010=0.81, checkpoint_000012=0.64)
    s = sel.select_policy("cluster_routing", last_checkpoint=tmp / "trial" / "checkpoint_000012",
                          warm_start_dir=tmp / "bc" / "router_pol", episodes=3)
    assert s.selected == "checkpoint_000010" and s.policy == "checkpoint_000010" and not s.is_warm_start
    assert [r["candidate"] for r in s.table] == [sel.WARM_START, "checkpoint_000005", "checkpoint_000010",
                                                 "checkpoint_000012"]
    assert all(e == 3 and seed == sel.VALIDATION_SEED for _, e, seed in seen)


def test_the_warm_start_is_returned_when_fine_tuning_made_it_worse(trial):
    tmp, scores, _ = trial
    scores.update(router_pol=0.80, checkpoint_000005=0.75, checkpoint_000010=0.60, checkpoint_000012=0.55)
    s = sel.select_policy("cluster_routing", last_checkpoint=tmp / "trial" / "checkpoint_000012",
                          warm_start_dir=tmp / "bc" / "router_pol", episodes=2, seed=700)
    assert s.is_warm_start and s.policy == "router_pol" and s.val_seed == 700


def test_ties_go_to_the_more_trained_candidate(trial):
    tmp, scores, _ = trial
    scores.update(router_pol=0.8, checkpoint_000005=0.8, checkpoint_000010=0.8, checkpoint_000012=0.8)
    s = sel.select_policy("cluster_routing", last_checkpoint=tmp / "trial" / "checkpoint_000012",
                          warm_start_dir=None, episodes=1)
    assert s.selected == "checkpoint_000012"


def test_selection_summary_reports_warm_start_final_and_selected(trial):
    tmp, scores, _ = trial
    scores.update(router_pol=0.70, checkpoint_000005=0.75, checkpoint_000010=0.81, checkpoint_000012=0.64)
    out = sel.select_policy("cluster_routing", last_checkpoint=tmp / "trial" / "checkpoint_000012",
                            warm_start_dir=tmp / "bc" / "router_pol", episodes=2)
    assert out.selected_path == str(tmp / "trial" / "checkpoint_000010")
    assert out.summary() == {"validation/warm_start_score": 0.70, "validation/final_score": 0.64,
                             "validation/selected_score": 0.81, "validation/selected_is_warm_start": 0.0}
    scores.update(router_pol=0.90)
    again = sel.select_policy("cluster_routing", last_checkpoint=tmp / "trial" / "checkpoint_000012",
                              warm_start_dir=tmp / "bc" / "router_pol", episodes=2)
    assert again.selected_path == str(tmp / "bc" / "router_pol")
    assert again.summary()["validation/selected_is_warm_start"] == 1.0


def test_the_exported_policy_is_the_selected_one():
    from inferencegym.rl.pipeline import selected_export

    rec = {"module_dir": "/r/trial/checkpoint_000012/learner_group/learner/rl_module"}
    assert selected_export(rec) == (rec["module_dir"], {})
    rec["selection"] = {"selected": "checkpoint_000010", "selected_path": "/r/trial/checkpoint_000010"}
    assert selected_export(rec) == ("/r/trial/checkpoint_000010/learner_group/learner/rl_module", {})
    rec["selection"] = {"selected": sel.WARM_START, "selected_path": "/r/exp_bc/router_pol"}
    assert selected_export(rec) == (rec["module_dir"], {"router_pol": "/r/exp_bc/router_pol"})


@pytest.fixture
def fake_pipeline(tmp_path, monkeypatch):
    """``train_and_compare`` with training and evaluation replaced by fakes (grades by policy name)."""
    import types

    import inferencegym.rl.pipeline as pipe

    trial_dir = tmp_path / "trial"
    for i in (5, 10):
        (trial_dir / f"checkpoint_{i:06d}").mkdir(parents=True)
    warm = tmp_path / "bc" / "router_pol"
    warm.mkdir(parents=True)
    held_out = {"router_pol": 0.80, "checkpoint_000005": 0.70, "checkpoint_000010": 0.60}
    val: dict[str, float] = {}

    def fake_training(cfg, **kw):
        return types.SimpleNamespace(metrics={"training_iteration": 10}, wall_s=1.0,
                                     checkpoint=str(trial_dir / "checkpoint_000010"), mlflow_run_id=None,
                                     tracking_uri=None, module_dir=str(trial_dir / "checkpoint_000010"),
                                     warm_start={"router_pol": str(warm)})

    def policy_of(path, task_id):
        return types.SimpleNamespace(name=__import__("pathlib").Path(path).name, module_id="router_pol")

    def fake_eval(policy, task_id, *, episodes, seed, name):
        return {"policy": name, "score_mean": held_out[policy.name], "score_ci95": 0.0, "episodes": episodes}

    def fake_compare(policy, task_id, *, name, baselines, episodes, seed, progress):
        return [fake_eval(policy, task_id, episodes=episodes, seed=seed, name=name)]

    def fake_val(policy, task_id, *, episodes, seed, name):
        return {"score_mean": val[policy.name], "score_ci95": 0.0}

    monkeypatch.setattr(pipe, "run_training", fake_training)
    monkeypatch.setattr(pipe, "load_checkpoint", policy_of)
    monkeypatch.setattr(pipe, "evaluate_one", fake_eval)
    monkeypatch.setattr(pipe, "compare", fake_compare)
    monkeypatch.setattr(sel, "load_checkpoint", policy_of)
    monkeypatch.setattr(sel, "evaluate_one", fake_val)
    cfg = types.SimpleNamespace(task_id="cluster_routing", name="demo", seed=0,
                                modules={"router_pol": types.SimpleNamespace(type="attention")},
                                evaluation=types.SimpleNamespace(baselines=[]))
    run = lambda: pipe.train_and_compare(cfg, config_path="c.yaml", episodes=2, seed=1000, baselines=[],  # noqa: E731
                                         val_episodes=2, progress=False)
    return run, val, warm, trial_dir


def test_demo_table_has_a_ppo_row_and_names_the_returned_checkpoint_when_the_warm_start_wins(fake_pipeline):
    from inferencegym.cli.demo import summary_lines

    run, val, warm, trial_dir = fake_pipeline
    val.update(router_pol=0.9, checkpoint_000005=0.8, checkpoint_000010=0.7)  # warm start selected
    record = run()
    names = [r["policy"] for r in record["rows"]]
    assert names[0].startswith(sel.WARM_START)
    # PPO is in the table: its best checkpoint on validation, evaluated on the same held-out seeds
    assert names[1].startswith("ppo (attention), best checkpoint checkpoint_000005")
    assert record["rows"][1]["score_mean"] == pytest.approx(0.70)
    assert record["improved_on_warm_start"] is False
    assert record["returned_checkpoint"] == str(warm)
    text = "\n".join(summary_lines(record))
    assert f"checkpoint of the returned policy: {warm}" in text
    assert "the table shows both" in text
    assert f"last PPO checkpoint (not returned): {trial_dir / 'checkpoint_000010'}" in text


def test_demo_names_the_selected_ppo_checkpoint_not_the_last_one(fake_pipeline):
    from inferencegym.cli.demo import summary_lines

    run, val, warm, trial_dir = fake_pipeline
    val.update(router_pol=0.5, checkpoint_000005=0.8, checkpoint_000010=0.7)  # an earlier checkpoint
    record = run()
    assert [r["policy"] for r in record["rows"]][:2] == ["ppo (attention), selected: checkpoint_000005",
                                                          sel.WARM_START]
    assert record["returned_checkpoint"] == str(trial_dir / "checkpoint_000005")
    text = "\n".join(summary_lines(record))
    assert f"checkpoint of the returned policy: {trial_dir / 'checkpoint_000005'}" in text
    # the table has no claim it cannot back: held-out 0.70 (PPO) < 0.80 (warm start) -> "no", both rows shown
    assert "improved on its warm start on the held-out seeds: [yellow]no[/] (the table shows both" in text
