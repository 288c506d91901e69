"""``benchmarks/tune_control_residual.py``: the goal forms it reports, and an up-head added to a
trained residual module keeps the module's downward cuts, gate and normalisation."""

import numpy as np
import torch
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from inferencegym.envs.control_features import RESIDUAL_NAMES
from inferencegym.rl.control_residual import BASE_INDEX, ResidualAutoscalerModule, fit_residual
from inferencegym.rl.control_spaces import control_spaces


def test_goal_forms_are_issue_22s_two_forms(bench_module):
    form = bench_module("tune_control_residual").goal_form
    assert form(-12.0, 0.0) == "cost" and form(-12.0, -0.4) == "cost" and form(-12.0, -2.0) == "-"
    assert form(-9.0, 3.0) == "-"
    assert form(0.0, 10.5) == "slo" and form(1.0, 15.0) == "-" and form(-3.0, 9.0) == "-"


def test_an_up_head_leaves_the_base_modules_cuts_gate_and_normalisation(bench_module):
    tune = bench_module("tune_control_residual")
    obs, act = control_spaces("cluster_autoscaling", role="autoscaler", features="residual")
    base = RLModuleSpec(module_class=ResidualAutoscalerModule, observation_space=obs, action_space=act,
                        model_config={"hidden": [8], "max_down": 2, "max_up": 2, "margin": 0.0}).build()
    x = np.abs(np.random.default_rng(3).normal(1.0, 0.5, size=(300, len(RESIDUAL_NAMES)))).astype(np.float32)
    x[:, BASE_INDEX] = 5.0
    up = np.arange(len(x)) % 2 == 0
    x[:, 4] = np.where(up, 2.0, 0.5)
    y = np.where(up, 7.0, 3.0).astype(np.float32)  # the teacher wants +2 / -2
    fit_residual(base, x, y, quantile=0.5, epochs=300)
    m = tune.with_up_head(base, x, np.where(up, 6.0, 3.0).astype(np.float32), 0.5, 300, 0)  # a lower up target: +1
    xt = torch.as_tensor(x)
    for k, v in base.state_dict().items():
        assert torch.equal(m.state_dict()[k], v), k
    tb, tm = base.target(xt).detach().numpy(), m.target(xt).detach().numpy()
    inside = base.in_range(xt).numpy()
    assert np.array_equal(tb[~up], tm[~up]) and np.all(tb[inside & ~up] == 3.0)
    assert np.mean(tb[inside & up] == 7.0) > 0.9 and np.mean(tm[inside & up] == 6.0) > 0.9
