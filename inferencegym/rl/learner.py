"""Conservative PPO fine-tuning: a custom RLlib Learner (new API stack) for a warm-started policy.

PPO fine-tuning a behaviour-cloned policy tends to destroy it in its first iterations (the README's
demo fell from the cloned router's level to below its teacher). :class:`ConservativePPOTorchLearner`
keeps RLlib's PPO loss (clipped surrogate, clipped value loss, entropy bonus, adaptive KL to the
sampling policy, whose coefficient ``PPOLearner`` adapts around ``kl_target``) and adds three terms,
configured by ``learner_config_dict`` (built from ``TrainConfig.fine_tune``):

- ``teacher_kl_coeff`` (number or ``[[env_step, value], ...]`` schedule): weight of
  ``KL(teacher || policy)`` on the states of the train batch, where the teacher is the frozen warm
  start (the BC module, loaded from ``teacher_state_paths``). The teacher's action distribution is
  queried on the states the *student* visits, so this is behaviour cloning on-policy (DAgger-style
  relabelling by the cloned policy); the schedule fades it out.
- ``actor_warmup_steps``: the actor's terms (surrogate and entropy) are scaled from 0 to 1 linearly
  over this many env steps, while the critic's loss keeps its full weight: the value function adapts
  to the PPO batch before the policy moves. (With Adam a loss scale is not exactly a learning-rate
  ramp, but a zero scale is a frozen actor and a small one a slow one.)
- ``entropy_knob_scale``: one multiplier of the entropy coefficient per ``MultiDiscrete`` component,
  so costly knobs (quantization reloads, KV budget) are explored less than cheap ones.

The extra figures are logged per module: ``teacher_kl``, ``curr_teacher_kl_coeff``,
``actor_scale``.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_KL_KEY,
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
)
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.schedules.scheduler import Scheduler
from ray.rllib.utils.torch_utils import explained_variance

TEACHER_KL_KEY = "teacher_kl"
TEACHER_COEFF_KEY = "curr_teacher_kl_coeff"
ACTOR_SCALE_KEY = "actor_scale"


def actor_scale(env_steps: float, warmup_steps: int) -> float:
    """Weight of the actor's loss terms after ``env_steps``: linear 0 -> 1 over ``warmup_steps``."""
    if warmup_steps <= 0:
        return 1.0
    return float(min(1.0, max(0.0, env_steps / warmup_steps)))


def knob_entropies(dist: Any) -> torch.Tensor:
    """Per-component entropies ``(B, K)`` of a (multi-)categorical distribution (K=1 if plain)."""
    cats = getattr(dist, "_cats", None)
    if cats is None:
        return dist.entropy().unsqueeze(-1)
    return torch.stack([c.entropy() for c in cats], dim=-1)


def load_teacher(path: str) -> Any:
    """The frozen warm-start module saved by the BC step (``RLModule.save_to_path``)."""
    teacher = RLModule.from_checkpoint(path)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


class ConservativePPOTorchLearner(PPOTorchLearner):
    """``PPOTorchLearner`` + KL to a frozen teacher, actor warm-up and per-knob entropy scales."""

    def build(self) -> None:
        super().build()
        d = dict(self.config.learner_config_dict or {})
        self._teacher_paths: dict[str, str] = dict(d.get("teacher_state_paths") or {})
        self._teachers: dict[str, Any] = {mid: load_teacher(p) for mid, p in self._teacher_paths.items()}
        self._teacher_sched = Scheduler(fixed_value_or_schedule=d.get("teacher_kl_coeff", 0.0),
                                        framework="torch", device=self._device)
        self._warmup_steps = int(d.get("actor_warmup_steps", 0))
        scale = d.get("entropy_knob_scale")
        self._knob_scale = torch.as_tensor(scale, dtype=torch.float32) if scale else None
        if self._knob_scale is not None:
            for mid in self.module.keys():
                nvec = getattr(self.module[mid].unwrapped().action_space, "nvec", None)
                if nvec is not None and len(nvec) != self._knob_scale.numel():
                    raise ValueError(f"entropy_knob_scale has {self._knob_scale.numel()} components but "
                                     f"module {mid!r} acts on MultiDiscrete{list(nvec)} ({len(nvec)} "
                                     "components); it is for the single-agent env's flat knob action")
        self._env_steps = 0.0

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        self._env_steps = float(timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))
        self._teacher_sched.update(timestep=int(self._env_steps))

    def compute_loss_for_module(self, *, module_id: str, config: Any, batch: dict[str, Any],
                                fwd_out: dict[str, Any]) -> Any:
        module = self.module[module_id].unwrapped()
        if Columns.LOSS_MASK in batch:
            mask = batch[Columns.LOSS_MASK]
            num_valid = torch.sum(mask)

            def mean(x: torch.Tensor) -> torch.Tensor:
                return torch.sum(x[mask]) / num_valid
        else:
            mean = torch.mean

        dist = module.get_train_action_dist_cls().from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
        prev = module.get_exploration_action_dist_cls().from_logits(batch[Columns.ACTION_DIST_INPUTS])
        ratio = torch.exp(dist.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP])
        adv = batch[Postprocessing.ADVANTAGES]
        surrogate = torch.min(adv * ratio, adv * torch.clamp(ratio, 1 - config.clip_param, 1 + config.clip_param))

        ent_k = knob_entropies(dist)
        entropy = ent_k.sum(-1)
        if self._knob_scale is not None and ent_k.shape[-1] > 1:
            bonus_entropy = (ent_k * self._knob_scale.to(ent_k.device)).sum(-1)
        else:
            bonus_entropy = entropy
        ent_coeff = self.entropy_coeff_schedulers_per_module[module_id].get_current_value()
        a_scale = actor_scale(self._env_steps, self._warmup_steps)

        value = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))
        vf_loss = torch.pow(value - batch[Postprocessing.VALUE_TARGETS], 2.0)
        vf_clipped = torch.clamp(vf_loss, 0, config.vf_clip_param)

        total = mean(a_scale * (-surrogate - ent_coeff * bonus_entropy) + config.vf_loss_coeff * vf_clipped)
        if config.use_kl_loss:
            kl = mean(prev.kl(dist))
            total = total + a_scale * self.curr_kl_coeffs_per_module[module_id] * kl
        else:
            kl = torch.tensor(0.0, device=total.device)

        metrics = {POLICY_LOSS_KEY: -mean(surrogate), VF_LOSS_KEY: mean(vf_clipped),
                   LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: mean(vf_loss),
                   LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(batch[Postprocessing.VALUE_TARGETS], value),
                   ENTROPY_KEY: mean(entropy), LEARNER_RESULTS_KL_KEY: kl, ACTOR_SCALE_KEY: a_scale}
        teacher = self._teachers.get(module_id)
        if teacher is not None:
            t_coeff = float(self._teacher_sched.get_current_value())
            with torch.no_grad():
                t_out = teacher.forward_train({Columns.OBS: batch[Columns.OBS]})
            t_dist = teacher.get_train_action_dist_cls().from_logits(t_out[Columns.ACTION_DIST_INPUTS])
            t_kl = mean(t_dist.kl(dist))
            if t_coeff > 0:
                total = total + t_coeff * t_kl
            metrics[TEACHER_KL_KEY] = t_kl
            metrics[TEACHER_COEFF_KEY] = t_coeff
        self.metrics.log_dict(metrics, key=module_id, window=1)
        return total
