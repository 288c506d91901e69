"""The conservative fine-tuning learner (rl/learner.py), Ray-free: ``build_learner`` in-process and
the loss evaluated on hand-made batches."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.core.rl_module.rl_module import RLModuleSpec  # noqa: E402
from ray.rllib.evaluation.postprocessing import Postprocessing  # noqa: E402
from rl_toy_envs import ToySingleEnv  # noqa: E402

from inferencegym.rl.config import ConfigError, load_config  # noqa: E402
from inferencegym.rl.learner import actor_scale, knob_entropies  # noqa: E402
from inferencegym.rl.modules import module_class  # noqa: E402
from inferencegym.rl.train import build_ppo_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MID = "default_policy"


def _learner(tmp_path, env, *sets):
    torch.manual_seed(0)
    teacher = RLModuleSpec(module_class=module_class("mlp"), observation_space=env.observation_space,
                           action_space=env.action_space, model_config={"hidden": [16]}).build()
    teacher.save_to_path(str(tmp_path / "teacher"))
    cfg = load_config(REPO / "rllib_configs" / "bursty_workload.yaml").with_overrides(sets=[
        "bc.enabled=true", "curriculum.enabled=false", "modules.default_policy.model_config={hidden: [16]}",
        "fine_tune.entropy_knob_scale={}", *sets])
    pc = build_ppo_config(cfg, env=type(env), teacher_paths={MID: str(tmp_path / "teacher")})
    torch.manual_seed(1)
    return pc.build_learner(env=env), teacher


def _batch(module, env, n=64, seed=0):
    rng = np.random.default_rng(seed)
    obs = torch.as_tensor(rng.random((n, *env.observation_space.shape), dtype=np.float32))
    with torch.no_grad():
        out = module.forward_train({Columns.OBS: obs})
        dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        act = dist.sample()
        logp = dist.logp(act)
    return {Columns.OBS: obs, Columns.ACTIONS: act, Columns.ACTION_LOGP: logp,
            Columns.ACTION_DIST_INPUTS: out[Columns.ACTION_DIST_INPUTS],
            Postprocessing.ADVANTAGES: torch.as_tensor(rng.normal(size=n), dtype=torch.float32),
            Postprocessing.VALUE_TARGETS: torch.as_tensor(rng.normal(size=n), dtype=torch.float32)}


def _loss(learner, batch):
    module = learner.module[MID].unwrapped()
    fwd = module.forward_train(batch)
    cfg = learner.config.get_config_for_module(MID)
    return learner.compute_loss_for_module(module_id=MID, config=cfg, batch=batch, fwd_out=fwd), module


def test_actor_scale_ramps_linearly_and_knob_entropies_split_the_sum():
    assert actor_scale(0, 0) == 1.0 and actor_scale(500, 1000) == 0.5
    assert actor_scale(0, 1000) == 0.0 and actor_scale(5000, 1000) == 1.0
    from ray.rllib.core.distribution.torch.torch_distribution import TorchMultiCategorical

    d = TorchMultiCategorical.from_logits(torch.randn(5, 7), input_lens=[3, 4])
    ent = knob_entropies(d)
    assert ent.shape == (5, 2)
    torch.testing.assert_close(ent.sum(-1), d.entropy())


def test_teacher_kl_pulls_the_policy_back_to_the_warm_start(tmp_path):
    """Actor frozen by the warm-up, critic off: the only policy gradient is the teacher KL, and a
    few steps on it shrink KL(teacher || policy)."""
    env = ToySingleEnv({})
    learner, _ = _learner(tmp_path, env, "fine_tune.teacher_kl_coeff=5.0", "fine_tune.actor_warmup_steps=100000",
                          "ppo.vf_loss_coeff=0", "ppo.entropy_coeff=0")
    module = learner.module[MID].unwrapped()
    with torch.no_grad():  # move the student's policy head well away from the teacher's
        module.pi.weight.add_(torch.randn(module.pi.weight.shape, generator=torch.Generator().manual_seed(3)))
    batch = _batch(module, env)
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    kls = []
    for _ in range(30):
        loss, _ = _loss(learner, batch)
        kls.append(float(learner.metrics.peek((MID, "teacher_kl"))))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert kls[0] > 0.05, kls[0]  # different random init than the teacher
    assert kls[-1] < 0.3 * kls[0], (kls[0], kls[-1])


def test_zero_actor_scale_and_no_teacher_leave_the_policy_head_alone(tmp_path):
    env = ToySingleEnv({})
    learner, _ = _learner(tmp_path, env, "fine_tune.teacher_kl_coeff=0", "fine_tune.actor_warmup_steps=100000",
                          "bc.enabled=false")
    batch = _batch(learner.module[MID].unwrapped(), env)
    loss, module = _loss(learner, batch)
    loss.backward()
    pi_grads = [p.grad for n, p in module.named_parameters() if n.startswith("pi")]
    assert pi_grads and all(g is None or float(g.abs().max()) == 0.0 for g in pi_grads)
    vf_grads = [p.grad for n, p in module.named_parameters() if n.startswith("vf")]
    assert any(g is not None and float(g.abs().max()) > 0 for g in vf_grads)
    # past the warm-up the actor learns
    learner.after_gradient_based_update(timesteps={"num_env_steps_sampled_lifetime": 200_000})
    module.zero_grad()
    loss, _ = _loss(learner, batch)
    loss.backward()
    assert any(p.grad is not None and float(p.grad.abs().max()) > 0
               for n, p in module.named_parameters() if n.startswith("pi"))


def test_entropy_scale_per_knob_needs_matching_components_and_valid_names(tmp_path):
    with pytest.raises(ConfigError, match="unknown knobs"):
        load_config(REPO / "rllib_configs" / "bursty_workload.yaml").with_overrides(
            sets=["fine_tune.entropy_knob_scale={quant: 0.1}"])
    with pytest.raises(ConfigError, match="env: single"):
        load_config(REPO / "rllib_configs" / "cluster_routing.yaml").with_overrides(
            sets=["fine_tune.entropy_knob_scale={quantization_tier: 0.1}"])
    env = ToySingleEnv({})  # 2 action components, the knob scale has 6
    with pytest.raises(ValueError, match="components"):
        _learner(tmp_path, env, "fine_tune.entropy_knob_scale={quantization_tier: 0.1}")


def test_a_knob_with_entropy_scale_zero_gets_no_entropy_gradient(tmp_path):
    """Entropy bonus alone (actor on, advantages 0, no KL): the logits of the knob scaled by 0 get no
    gradient, those of a knob scaled by 1 do."""
    from gymnasium import spaces

    from inferencegym.envs.actions import FLAT_BUCKETS, FLAT_NVEC

    env = ToySingleEnv({})
    env.action_space = spaces.MultiDiscrete(list(FLAT_NVEC))
    learner, _ = _learner(tmp_path, env, "fine_tune.entropy_knob_scale={quantization_tier: 0.0}",
                          "ppo.entropy_coeff=0.1", "ppo.vf_loss_coeff=0", "ppo.use_kl_loss=false",
                          "fine_tune.teacher_kl_coeff=0", "fine_tune.actor_warmup_steps=0")
    batch = _batch(learner.module[MID].unwrapped(), env)
    batch[Postprocessing.ADVANTAGES] = torch.zeros_like(batch[Postprocessing.ADVANTAGES])
    loss, module = _loss(learner, batch)
    loss.backward()
    names = list(FLAT_BUCKETS)
    q = names.index("quantization_tier")
    start = int(sum(FLAT_NVEC[:q]))
    g = module.pi.weight.grad.abs().sum(1)
    assert float(g[start:start + FLAT_NVEC[q]].max()) == 0.0
    assert float(g[:start].max()) > 0.0
