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
