"""PPO fine-tuning of the learned autoscaler (issue 22 item 6): the shaped reward pays the same
episode return up to a constant (so it ranks every policy as the grade does), the critic's
privileged features never reach the actor, and the tuned actor exports into the shipped size."""

import numpy as np
import pytest

from inferencegym.envs.control_env import CRITIC_NAMES, ControlEnv
from inferencegym.envs.control_features import feature_names
from inferencegym.tasks.control import get_control_task

W = get_control_task("cluster_autoscaling").grade_cost_weight


def play(env: ControlEnv, seed: int, actions) -> tuple[list, list, dict]:
    obs, _ = env.reset(seed=seed)
    xs, rs, done, k = [obs], [], False, 0
    while not done:
        obs, r, done, _, info = env.step(actions(k))
        xs.append(obs)
        rs.append(r)
        k += 1
    return xs, rs, info


def under_then_over(k: int) -> int:
    return 1 if k < 12 else 8  # one replica at first: TTFT misses, then recovery


@pytest.mark.parametrize("seed", [3, 11])
def test_shaped_return_is_the_grade_minus_one_and_terminal_return_the_grade_minus_w(seed):
    _, r_term, i_term = play(ControlEnv(features="schedule", episode_windows_override=3), seed, under_then_over)
    _, r_shap, i_shap = play(ControlEnv(features="schedule", episode_windows_override=3, reward="shaped"), seed,
                             under_then_over)
    assert i_term["score"] == i_shap["score"]  # the reward does not change the episode
    assert i_term["summary"]["slo_attainment"] < 0.95  # the under-provisioned start fails requests
    assert sum(r_term) == pytest.approx(i_term["score"] - W, abs=1e-9)
    assert sum(r_shap) == pytest.approx(i_shap["score"] - 1.0, abs=1e-9)
    # the failures are charged during the episode, not only at its end
    assert sum(r_shap[:-1]) < sum(r_term[:-1]) - 0.05
    assert all(r <= 1e-12 for r in r_shap[:-1])


def test_critic_features_are_appended_after_the_actor_features():
    a, _, _ = play(ControlEnv(features="schedule", episode_windows_override=2), 5, lambda k: 4)
    b, _, _ = play(ControlEnv(features="schedule", episode_windows_override=2, critic_obs=True), 5, lambda k: 4)
    n = len(feature_names("schedule"))
    assert b[0].shape == (n + len(CRITIC_NAMES),)
    assert all(np.array_equal(x, y[:n]) for x, y in zip(a, b))
    prog = [y[-1] for y in b]
    assert prog[0] == 0.0 and prog[-1] == pytest.approx(1.0) and np.all(np.diff(prog) > 0)
    assert max(y[n] for y in b) > 0  # realized arrivals ahead


def test_unknown_reward_is_a_one_line_error():
    with pytest.raises(ValueError, match="reward must be one of terminal, shaped"):
        ControlEnv(reward="dense")


def test_asymmetric_module_keeps_the_warm_actor_and_exports_it():
    import torch
    from ray.rllib.core.columns import Columns

    from inferencegym.rl.control import build_module
    from inferencegym.rl.control_finetune import actor_only, asymmetric_from_warm

    env = ControlEnv(features="schedule", episode_windows_override=2, critic_obs=True)
    plain = ControlEnv(features="schedule", episode_windows_override=2)
    warm = build_module(plain.observation_space, plain.action_space, [16, 16], seed=1)
    m = asymmetric_from_warm(warm, env.observation_space, sharpen=3.0, seed=2)
    x = torch.as_tensor(np.random.default_rng(0).uniform(0, 1, (64, env.observation_space.shape[0])), dtype=torch.float32)
    n = plain.observation_space.shape[0]
    with torch.no_grad():
        lw = warm.forward_inference({Columns.OBS: x[:, :n]})[Columns.ACTION_DIST_INPUTS]
        lm = m.forward_inference({Columns.OBS: x})[Columns.ACTION_DIST_INPUTS]
        x2 = x.clone()
        x2[:, n:] = 7.0  # privileged features change the value, never the actor
        assert torch.equal(m.forward_inference({Columns.OBS: x2})[Columns.ACTION_DIST_INPUTS], lm)
        assert not torch.equal(m.compute_values({Columns.OBS: x2}), m.compute_values({Columns.OBS: x}))
        assert torch.allclose(lm, 3.0 * lw, atol=1e-5)
        assert torch.equal(lm.argmax(-1), lw.argmax(-1))
        back = actor_only(m, warm)
        assert torch.allclose(back.forward_inference({Columns.OBS: x[:, :n]})[Columns.ACTION_DIST_INPUTS], lm)
    with pytest.raises(ValueError, match="critic features expected"):
        asymmetric_from_warm(warm, plain.observation_space)
