"""Policy registry, baselines, evaluation and the `inferencegym evaluate` CLI."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

from inferencegym.envs import ServeAction, list_tasks
from inferencegym.evaluation.single import evaluate_policy, run_episode
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies import is_privileged, get_policy, list_policies

SINGLE = [t.task_id for t in list_tasks(kind="single")]
BASELINES = ["random", "static_default", "heuristic", "best_static", "clairvoyant"]


def test_registry_lists_baselines_and_rejects_unknown():
    assert set(BASELINES) <= set(list_policies())
    with pytest.raises(ValueError, match="valid: .*random.*checkpoint:PATH"):
        get_policy("nope", "static_workload")
    with pytest.raises(ValueError, match="unknown policy scheme 'ftp:'"):
        get_policy("ftp://x", "static_workload")
    with pytest.raises(ValueError, match="unknown task"):
        get_policy("random", "nope")


@pytest.mark.parametrize("task_id", SINGLE)
@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_acts_validly(task_id, name):
    pol = get_policy(name, task_id)
    env = LLMServeEnv(task_id, episode_windows=12, privileged=is_privileged(name))
    ep = run_episode(env, pol, seed=0)
    assert ep.steps == 12 and 0.0 <= ep.score <= 1.0


def test_random_policy_is_seeded():
    a = get_policy("random", "static_workload")
    b = get_policy("random", "static_workload")
    a.reset(seed=4)
    b.reset(seed=4)
    assert [a.act(None) for _ in range(5)] == [b.act(None) for _ in range(5)]


def test_static_default_is_vllm_defaults():
    a = get_policy("static_default", "bursty_workload").act(None)
    assert a == ServeAction(batch_cap=256, kv_budget_fraction=0.9, speculation_depth=0,
                            quantization_tier="FP16", prefill_decode_split=False, priority_routing=False)


def test_clairvoyant_needs_the_oracle():
    pol = get_policy("clairvoyant", "bursty_workload")
    with pytest.raises(ValueError, match="oracle"):
        pol.act(np.zeros(24), {})


def test_best_static_search_used_training_seeds_only():
    from inferencegym.evaluation.single import DEFAULT_EVAL_SEED
    from inferencegym.policies.baselines import _best_static_table, _clairvoyant_table

    for table in (_best_static_table(), _clairvoyant_table()):
        for task_id in SINGLE:
            entry = table["tasks"][task_id]
            assert max(entry["train_seeds"]) < DEFAULT_EVAL_SEED


def test_schemes_are_dispatched_to_handlers_registered_from_above(monkeypatch):
    """policies sits below rl and apps: it never imports them; they register their scheme handlers."""
    import inferencegym.policies as registry

    calls = []
    monkeypatch.setattr(registry, "_SCHEME_HANDLERS", {})
    with pytest.raises(ValueError, match="inferencegym.rl"):
        get_policy("checkpoint:/tmp/x", "static_workload")
    registry.register_scheme("checkpoint:", lambda spec, task_id: calls.append(("load", spec, task_id)) or "L")
    registry.register_scheme("pretrained:", lambda spec, task_id: calls.append(("load", spec, task_id)))
    registry.register_scheme("http://", lambda url, task_id: calls.append(("http", url, task_id)))
    assert get_policy("checkpoint:/tmp/x", "static_workload") == "L"
    get_policy("pretrained:static_workload", "static_workload")
    get_policy("http://127.0.0.1:8000", "bursty_workload")
    assert calls == [("load", "checkpoint:/tmp/x", "static_workload"),
                     ("load", "pretrained:static_workload", "static_workload"),
                     ("http", "http://127.0.0.1:8000", "bursty_workload")]
    with pytest.raises(ValueError, match="unknown policy scheme"):
        registry.register_scheme("ftp://", lambda spec, task_id: None)


def test_rl_and_the_policy_endpoint_register_their_schemes():
    import inferencegym.apps.policy_endpoint  # noqa: F401
    import inferencegym.policies as registry
    import inferencegym.rl  # noqa: F401
    from inferencegym.apps.policy_endpoint.client import HTTPPolicy

    assert registry._SCHEME_HANDLERS["checkpoint:"] is inferencegym.rl._load_policy
    assert registry._SCHEME_HANDLERS["pretrained:"] is inferencegym.rl._load_policy
    assert registry._SCHEME_HANDLERS["https://"] is HTTPPolicy
    with pytest.raises(FileNotFoundError):  # the real loader answers: no such checkpoint
        get_policy("checkpoint:/nonexistent/ckpt", "static_workload")


def test_evaluate_policy_aggregates_and_is_deterministic():
    r1 = evaluate_policy("heuristic", "static_workload", episodes=3, seed=1000, episode_windows=20)
    r2 = evaluate_policy("heuristic", "static_workload", episodes=3, seed=1000, episode_windows=20)
    d = r1.to_json_dict()
    assert d["seeds"] == [1000, 1001, 1002] and d["episodes"] == 3
    assert d == r2.to_json_dict()
    assert d["score_ci95"] >= 0 and 0 <= d["score_mean"] <= 1
    for k in ("ttft_p99_s", "tbt_p99_s", "e2e_p99_s", "throughput_tok_s", "cost_per_1k_tokens"):
        assert d[k] is not None and d[k] >= 0


def test_flat_actions_from_policies_are_accepted():
    from inferencegym.evaluation.single import to_env_action

    a = to_env_action(np.array([3, 6, 0, 0, 1, 0]))
    assert isinstance(a, ServeAction) and a.batch_cap == 32 and a.prefill_decode_split


def test_cli_evaluate_json():
    from typer.testing import CliRunner

    from inferencegym.cli import app

    res = CliRunner().invoke(app, ["evaluate", "--policy", "static_default,random", "--task", "static_workload",
                                   "--episodes", "2", "--seed", "5", "--episode-windows", "10", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [r["policy"] for r in rows] == ["static_default", "random"]
    keys = {"policy", "task", "episodes", "seeds", "score_mean", "score_ci95", "ttft_p99_s", "tbt_p99_s",
            "e2e_p99_s", "throughput_tok_s", "cost_per_1k_tokens"}
    for r in rows:
        assert keys <= set(r) and r["seeds"] == [5, 6] and r["task"] == "static_workload"


def test_cli_evaluate_table_and_errors():
    from typer.testing import CliRunner

    from inferencegym.cli import app

    res = CliRunner().invoke(app, ["evaluate", "-p", "heuristic", "-p", "static_default", "--task", "all",
                                   "-n", "1", "--episode-windows", "5"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for t in SINGLE:
        assert t in res.stdout
    bad = CliRunner().invoke(app, ["evaluate", "-p", "nope", "--task", "static_workload", "-n", "1"])
    assert bad.exit_code != 0 and "unknown policy" in bad.output
