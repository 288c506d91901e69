"""PPO fine-tuning of the learned autoscaler from its DAgger warm start (issue 22 item 6):
the pieces ``benchmarks/finetune_control.py`` assembles.

Why the first attempt (terminal SLO reward, shared-trunk critic, the warm start's own sampling
temperature) did not move the greedy policy, and what each piece here changes:

* **Credit**: ``ControlEnv(reward="shaped")`` charges a missed TTFT deadline one control step after
  it passes (potential-based, the undiscounted return is ``grade - 1`` for every episode), so
  ``gamma`` can be 0.99 (a ~25-minute horizon against a ~70 s start-up delay) instead of 0.999
  over 1,440 steps with one payoff at the end.
* **Critic**: :func:`asymmetric_from_warm` gives the module a critic with its own trunk that also
  reads the realized arrival rate ahead (``CRITIC_NAMES``, training only): the value of a state is
  mostly the coming load against the fleet, which the actor cannot see; the actor's trunk no longer
  moves with the value loss (with the shared trunk the value gradients changed the greedy policy).
* **Exploration around the greedy policy**: ``sharpen`` scales the actor's logits (greedy actions
  unchanged): the DAgger clone is trained with cross-entropy and its samples wander far from its
  greedy actions, so PPO improved a noisy policy that is not the one evaluated.
* **KL to the warm start** (``ConservativePPOTorchLearner``'s teacher term): the frozen sharpened
  warm start, so the policy moves only where the advantages consistently say so.

:func:`actor_only` exports the actor (trunk + policy head) into the shipped observation size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferencegym.envs.control_env import CRITIC_NAMES, ControlEnv


def asymmetric_from_warm(warm: Any, obs_space: Any, *, sharpen: float = 1.0, seed: int = 0) -> Any:
    """An ``MLPModule`` on ``obs_space`` (the warm start's features + ``CRITIC_NAMES``) whose actor is
    the warm module's trunk and policy head (logits x ``sharpen``) and whose critic is a fresh trunk
    over the whole observation."""
    import torch

    n_actor = warm.observation_space.shape[0]
    if obs_space.shape[0] != n_actor + len(CRITIC_NAMES):
        raise ValueError(f"the env observation has {obs_space.shape[0]} values; the warm start reads {n_actor} "
                         f"(+ {len(CRITIC_NAMES)} critic features expected): build ControlEnv(critic_obs=True) "
                         "with the warm start's feature set")
    if sharpen <= 0:
        raise ValueError(f"sharpen must be > 0 (a logit scale), got {sharpen}")
    hidden = list(warm.model_config["hidden"])
    torch.manual_seed(seed)
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import MLPModule

    m = RLModuleSpec(module_class=MLPModule, observation_space=obs_space, action_space=warm.action_space,
                     model_config={"hidden": hidden, "critic_privileged_dims": len(CRITIC_NAMES)}).build()
    src = warm.state_dict()
    with torch.no_grad():
        for k, v in m.state_dict().items():
            if k.startswith("trunk."):
                v.copy_(src[k])
        m.pi.weight.copy_(src["pi.weight"] * sharpen)
        m.pi.bias.copy_(src["pi.bias"] * sharpen)
    return m


def actor_only(module: Any, warm: Any) -> Any:
    """The actor of an asymmetric module as a plain ``MLPModule`` of the warm start's spaces (what
    ships; the value head is copied only so the export is complete: it is not used to act)."""
    import torch

    from inferencegym.rl.control import build_module

    out = build_module(warm.observation_space, warm.action_space, list(warm.model_config["hidden"]))
    src = module.state_dict()
    with torch.no_grad():
        for k, v in out.state_dict().items():
            if k.startswith("trunk.") or k.startswith("pi."):
                v.copy_(src[k])
    return out


def discounted(rewards: Any, gamma: float) -> np.ndarray:
    """Reward-to-go ``sum_k gamma^k r_{t+k}`` of one episode's rewards."""
    g, out = 0.0, np.zeros(len(rewards))
    for i in range(len(rewards) - 1, -1, -1):
        g = float(rewards[i]) + gamma * g
        out[i] = g
    return out


def sampled_episode(env: ControlEnv, module: Any, seed: int) -> tuple[list, list, dict]:
    """One episode of ``module``'s sampled actions (``default_rng(seed)``): observations, rewards
    and the episode's grade figures (``greedy_share``: how often the sample was the greedy action)."""
    import torch
    from ray.rllib.core.columns import Columns

    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    xs, rs, done, agree = [], [], False, 0
    while not done:
        with torch.no_grad():
            logits = module.forward_inference({Columns.OBS: torch.as_tensor(obs[None])})[Columns.ACTION_DIST_INPUTS][0]
        p = torch.softmax(logits.double(), -1).numpy()
        a = int(rng.choice(len(p), p=p / p.sum()))
        agree += a == int(logits.argmax())
        xs.append(obs)
        obs, r, done, _, info = env.step(a)
        rs.append(r)
    ep = {"day": env.day, "seed": seed, "score": info["score"], "gpu_hours": info["summary"]["gpu_hours"],
          "slo_attainment": info["summary"]["slo_attainment"], "greedy_share": agree / len(rs),
          "return": float(sum(rs))}
    return xs, rs, ep


def _learner_class() -> Any:
    """``ConservativePPOTorchLearner`` with the teacher KL computed from log-softmax (finite for any
    finite logits: the sharpened warm start puts probabilities below float32's range on far actions,
    where ``Categorical.kl`` returns inf and the update NaN)."""
    import torch
    from ray.rllib.core.columns import Columns

    from inferencegym.rl.learner import TEACHER_COEFF_KEY, TEACHER_KL_KEY, ConservativePPOTorchLearner

    class ControlPPOLearner(ConservativePPOTorchLearner):
        def compute_loss_for_module(self, *, module_id: str, config: Any, batch: dict, fwd_out: dict) -> Any:
            teachers, self._teachers = self._teachers, {}
            try:
                total = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch,
                                                        fwd_out=fwd_out)
            finally:
                self._teachers = teachers
            teacher = teachers.get(module_id)
            if teacher is None:
                return total
            with torch.no_grad():
                lp_t = torch.log_softmax(teacher.forward_train({Columns.OBS: batch[Columns.OBS]})
                                         [Columns.ACTION_DIST_INPUTS], -1)
            lp = torch.log_softmax(fwd_out[Columns.ACTION_DIST_INPUTS], -1)
            kl = (lp_t.exp() * (lp_t - lp)).sum(-1)
            if Columns.LOSS_MASK in batch:
                mask = batch[Columns.LOSS_MASK]
                kl = kl[mask]
            kl = kl.mean()
            coeff = float(self._teacher_sched.get_current_value())
            self.metrics.log_dict({TEACHER_KL_KEY: kl, TEACHER_COEFF_KEY: coeff}, key=module_id, window=1)
            return total + coeff * kl if coeff > 0 else total

    return ControlPPOLearner


def control_learner_class() -> Any:
    """The PPO learner of the autoscaler's fine-tuning (see :func:`_learner_class`)."""
    return _learner_class()
