"""Issue 17, defects 1-3: no oracle on the agent's side, an unforgeable grader, no grade floor for
doing nothing. Each test here failed before the fix."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.evaluation.single import evaluate_policy, run_episode
from inferencegym.tasks.graders import EpisodeLog, WindowRecord, grade
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.envs.verifier import ReplayError, replay_grade
from inferencegym.policies import get_policy, is_privileged
from inferencegym.policies.baselines import EXPLOITS, StaticPolicy
from inferencegym.policies.llm import LLMPolicy

TASKS = ("static_workload", "bursty_workload", "adversarial_multitenant")


# -- 1. the oracle -----------------------------------------------------------------------------
def test_info_has_no_oracle_by_default_and_only_privileged_envs_get_it():
    env = LLMServeEnv("adversarial_multitenant", episode_windows=3)
    _, info = env.reset(seed=1)
    _, _, _, _, info2 = env.step({})
    assert not [k for k in {**info, **info2} if k.startswith("oracle/")]
    env_p = LLMServeEnv("adversarial_multitenant", episode_windows=3, privileged=True)
    _, info = env_p.reset(seed=1)
    assert "oracle/phase_name" in info and "oracle/next_arrivals" in info


def test_privileged_policies_are_marked_in_the_registry_and_need_a_privileged_env():
    assert is_privileged("clairvoyant") and is_privileged("clairvoyant_work")
    assert not any(is_privileged(p) for p in ("random", "static_default", "heuristic", "best_static"))
    pol = get_policy("clairvoyant", "bursty_workload")
    assert is_privileged(pol)
    with pytest.raises(ValueError, match="privileged"):
        run_episode(LLMServeEnv("bursty_workload", episode_windows=2), pol, seed=0)
    # the evaluation builds the privileged env for it: same figures as the shipped table
    r = evaluate_policy("clairvoyant", "bursty_workload", episodes=1, seed=1000, episode_windows=5)
    assert 0 <= r.episodes[0].score <= 1


def test_llm_agent_prompt_never_sees_the_oracle_even_from_a_privileged_env():
    env = LLMServeEnv("adversarial_multitenant", episode_windows=2, privileged=True)
    obs, info = env.reset(seed=0)
    obs, *_, info = env.step({})
    text = LLMPolicy.describe_observation(obs, info)
    assert "oracle" not in text and info["oracle/phase_name"] not in text


# -- 2. the grader only grades what the env wrote -------------------------------------------------
def test_replay_grade_equals_the_in_process_grade():
    env = LLMServeEnv("bursty_workload")
    env.reset(seed=7)
    rng = np.random.default_rng(0)
    actions = []
    for _ in range(env.task.episode_windows):
        a = {"batch_cap": int(rng.integers(16, 512)), "kv_budget_fraction": 0.9}
        actions.append(a)
        env.step(a)
    res = replay_grade("bursty_workload", 7, actions)
    assert res.done and res.steps == env.task.episode_windows
    assert res.grade.model_dump() == env.grade().model_dump()  # bit-identical


def test_replay_grade_refuses_what_it_cannot_replay():
    with pytest.raises(ReplayError, match="windows"):
        replay_grade("static_workload", 0, [{}] * 10_000)
    with pytest.raises(ReplayError, match="seed"):
        replay_grade("static_workload", -1, [])
    with pytest.raises(ReplayError, match=r"actions\[1\]"):
        replay_grade("static_workload", 0, [{}, {"batch_cap": 0}])


def test_forged_figures_cannot_inflate_a_grade():
    """Fed to the grade function directly (what the HTTP grader no longer accepts at all), forged
    figures are still refused or clamped."""
    forged = EpisodeLog(task_id="static_workload", windows=[
        WindowRecord(step=0, offered_tokens=[10.0], good_tokens=[1e9], produced_tokens=1e9,
                     window_usd=1e-9, quality_delta=0.0)])
    g = grade("static_workload", forged)
    assert g.good_tokens <= g.offered_tokens  # good > offered no longer buys a cost score
    with pytest.raises(ValueError):
        WindowRecord(step=0, offered_tokens=[1.0], good_tokens=[1.0], produced_tokens=float("inf"),
                     window_usd=0.0, quality_delta=0.0)
    assert grade("static_workload", EpisodeLog(task_id="static_workload")).score == 0.0  # empty: 0


# -- 3. no grade floor for doing nothing --------------------------------------------------------
@pytest.mark.parametrize("task_id", TASKS)
def test_serving_almost_nothing_grades_at_or_below_random(task_id):
    seeds = dict(episodes=2, seed=1000)
    drop = evaluate_policy(StaticPolicy(EXPLOITS["drop_traffic"]), task_id, **seeds)
    rnd = evaluate_policy("random", task_id, **seeds)
    d = float(np.mean([e.score for e in drop.episodes]))
    r = float(np.mean([e.score for e in rnd.episodes]))
    assert d <= r, f"batch_cap=1, kv_budget_fraction=0.1 grades {d:.3f} > random {r:.3f}"
    assert d < 0.1  # before the fix: 0.25 on every task
    for e in drop.episodes:  # every term scales with the work served
        assert e.breakdown["grade/served_share"] < 0.5
        assert e.score <= e.breakdown["grade/slo_share"] * 0.65 + e.breakdown["grade/served_share"] * 0.35 + 1e-12
