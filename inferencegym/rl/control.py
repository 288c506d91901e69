"""Learned control-plane agents (issue 22): the autoscaler of ``cluster_autoscaling`` and the
admission controller of ``cluster_admission`` as RLModules.

Autoscaler: an MLP (``MLPModule``) over the features of ``envs/control_features.py`` (``schedule``
for the shipped module, ``history`` for older exports; the export names its set),
``Discrete(max_replicas + 1)`` target replicas. Trained on the training days only:

1. **Imitation of the privileged ceiling** (DAgger, ``benchmarks/train_control.py``): the first
   round rolls the ``hindsight`` controller (which knows the episode's realized arrivals) and
   records its target at every control step; later rounds roll the student (with probability
   ``beta`` the teacher) and relabel every visited state with the teacher's target. The student
   sees observable features only, so it learns the best observable approximation of the
   ceiling's schedule.
2. **Conservative PPO fine-tuning** (``benchmarks/finetune_control.py``): RLlib PPO on
   ``ControlEnv`` from the DAgger module (its value head fitted first), small learning rate and
   clip; exported only if it beats its warm start on the validation days.

:class:`LearnedAutoscaler` / :class:`LearnedAdmission` adapt a loaded module to the controller
interfaces of ``evaluation/control.py`` (``reset(ctx)`` / ``act(obs)``; ``reset(capacity_rps)`` /
``decide(tier, t_s, state)``), so ``evaluate --policy pretrained:cluster_autoscaling`` runs it on the
same episodes as the baselines.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import numpy as np

from inferencegym.envs.control_features import control_features, feature_set_of_size, gateway_features
from inferencegym.policies.admission import LevelAdmission
from inferencegym.policies.autoscalers import make_autoscaler
from inferencegym.rl.control_spaces import ADMISSION_NAMES, control_spaces
from inferencegym.tasks.control import get_control_task

__all__ = ["ADMISSION_NAMES", "control_spaces", "LearnedAutoscaler", "LearnedAdmission", "load_control_policy"]

class LearnedAutoscaler:
    """A module policy as an autoscaler: features of the fleet's scrape -> greedy target replicas."""

    def __init__(self, policy: Any, features: str = "history", name: str = "learned") -> None:
        self.policy, self.features, self.name = policy, features, name

    def reset(self, ctx: Any) -> None:
        self.ctx = ctx
        if hasattr(self.policy, "reset"):
            self.policy.reset()

    def features_of(self, obs: Any) -> np.ndarray:
        return control_features(obs, self.ctx, self.features)

    def act(self, obs: Any) -> int:
        return self.ctx.clamp(int(self.policy.act(self.features_of(obs))))


class LearnedAdmission(LevelAdmission):
    """A module policy as an admission controller: one admission level (``ADMISSION_LEVELS``) per
    gateway tick from ``gateway_features``."""

    def __init__(self, policy: Any, name: str = "learned") -> None:
        self.policy, self.name = policy, name

    def reset(self, capacity_rps: float) -> None:
        super().reset(capacity_rps)
        self.recent: list[int] = []

    def features_of(self, state: Any) -> np.ndarray:
        return gateway_features(state, self.cap, self.recent)

    def level_at(self, state: Any) -> int:
        self.recent.append(state.arrivals_last_tick)
        return int(self.policy.act(self.features_of(state)))


def wrap_control_policy(policy: Any, task_id: str, meta: dict | None = None, name: str = "learned") -> Any:
    """A policy with ``act(features) -> int`` (a loaded module, an HTTP endpoint) as the autoscaler
    or the admission controller of ``task_id`` (``meta``: the export's ``control`` entry)."""
    meta = meta or {}
    task = get_control_task(task_id)
    role = meta.get("role", "admission" if task.fixed_replicas else "autoscaler")
    if role == "admission":
        return LearnedAdmission(policy, name=name)
    features = meta.get("features")
    space = (getattr(policy, "metadata", None) or {}).get("observation_space") \
        if isinstance(getattr(policy, "metadata", None), dict) else None
    if features is None and space and space.get("type") == "Box":  # a served module: its size names its set
        features = feature_set_of_size(int(space["shape"][0]))
    return LearnedAutoscaler(policy, features or "history", name=name)


def load_control_policy(spec: str, task_id: str) -> Any:
    """``pretrained:TASK`` / ``checkpoint:PATH`` (an RLlib checkpoint, or a directory exported by
    ``benchmarks/train_control.py``) of a control task -> an autoscaler or admission controller (the handler ``inferencegym.rl`` registers with ``evaluation/control.py``)."""
    from inferencegym.rl.policy_loader import load_exported, load_policy

    path = Path(spec.partition(":")[2]).expanduser()
    if spec.startswith("checkpoint:") and (path / "module.json").is_file():  # an export (train_control.py)
        pol = load_exported(path, task_id)
    else:
        pol = load_policy(spec, task_id)
    return wrap_control_policy(pol, task_id, getattr(pol, "meta", {}).get("control"), name=spec)


# ------------------------------------------------------------------------------------ training


def greedy_actor(module: Any) -> Callable[[np.ndarray], int]:
    """The module's greedy action for one observation (for rollouts during training)."""
    import torch
    from ray.rllib.core.columns import Columns

    def act(x: np.ndarray) -> int:
        with torch.no_grad():
            out = module.forward_inference({Columns.OBS: torch.as_tensor(x[None])})
        return int(out[Columns.ACTION_DIST_INPUTS][0].argmax())

    return act


def collect_autoscaler(env: Any, *, seeds: list[int], student: Callable | None = None, beta: float = 1.0,
                       teacher: str = "hindsight", options: dict | None = None) -> tuple[list, list, list[dict]]:
    """Roll episodes of ``env`` (a ``ControlEnv``): the teacher acts with probability ``beta`` (per
    step, from ``default_rng(seed)``), else the student; every visited observation is labelled with
    the teacher's target (``options``: ``reset`` options, e.g. the day). Returns (observations, teacher
    actions, per-episode summaries)."""
    obs_l, act_l, eps = [], [], []
    for s in seeds:
        obs, info = env.reset(seed=s, options=options)
        t = make_autoscaler(teacher)
        t.reset(dataclasses.replace(env.ctx, future_arrivals_s=env.arrivals["arrival_s"]))
        rng = np.random.default_rng(s)
        done = False
        while not done:
            a_t = t.act(env.fleet.observe())
            obs_l.append(obs)
            act_l.append(a_t)
            a = a_t if student is None or rng.random() < beta else student(obs)
            obs, _, done, _, info = env.step(a)
        eps.append({"day": env.day, "seed": s, "score": info["score"], "gpu_hours": info["summary"]["gpu_hours"],
                    "slo_attainment": info["summary"]["slo_attainment"]})
    return obs_l, act_l, eps


def build_module(obs_space: Any, act_space: Any, hidden: list[int], seed: int = 0) -> Any:
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import MLPModule

    torch.manual_seed(seed)
    return RLModuleSpec(module_class=MLPModule, observation_space=obs_space, action_space=act_space,
                        model_config={"hidden": list(hidden)}).build()


def export_control_module(module: Any, out_dir: str | Path, *, task_id: str, role: str, features: str | None,
                          hidden: list[int], extra: dict | None = None) -> Path:
    from inferencegym.rl.policy_loader import export_module

    ctl = {"role": role, **({"features": features} if features else {})}
    return export_module(module, out_dir, module_type="mlp", model_config={"hidden": list(hidden)},
                         module_id="default_policy", task_id=task_id, kind="control",
                         extra={"control": ctl, **(extra or {})})


class _Actor:
    """``act(x)`` of a greedy module (what ``LearnedAdmission`` / ``LearnedAutoscaler`` call)."""

    def __init__(self, module: Any) -> None:
        self.act = greedy_actor(module)


class DAggerAdmission(LevelAdmission):
    """Training rollouts of the admission controller: at every gateway tick record the student's
    observation and the privileged teacher's level; act with the teacher's level with probability
    ``beta`` (from ``rng``), else the student's."""

    def __init__(self, teacher: Any, student: Callable | None, beta: float, rng: np.random.Generator) -> None:
        self.teacher, self.student, self.beta, self.rng = teacher, student, beta, rng
        self.obs: list = []
        self.acts: list = []

    def reset(self, capacity_rps: float) -> None:
        super().reset(capacity_rps)
        self.teacher.reset(capacity_rps)
        self.recent: list[int] = []

    def set_future(self, arrival_s: np.ndarray, tiers: np.ndarray) -> None:
        self.teacher.set_future(arrival_s, tiers)

    def level_at(self, state: Any) -> int:
        self.recent.append(state.arrivals_last_tick)
        x = gateway_features(state, self.cap, self.recent)
        a_t = self.teacher.level_at(state)
        self.obs.append(x)
        self.acts.append(a_t)
        if self.student is None or self.rng.random() < self.beta:
            return a_t
        return int(self.student(x))


def collect_admission(task_id: str, *, days_seeds: list[tuple[int, int]], student: Callable | None = None,
                      beta: float = 1.0) -> tuple[list, list, list[dict]]:
    """Admission rollouts on (day, seed) pairs, labelled by ``hindsight_admission``."""
    from inferencegym.evaluation.control import run_episode
    from inferencegym.policies.admission import make_admission

    obs_l, act_l, eps = [], [], []
    for day, s in days_seeds:
        rec = DAggerAdmission(make_admission("hindsight_admission"), student, beta, np.random.default_rng(s))
        out = run_episode(task_id, "admit_all", day=day, seed=s, admission=rec)
        obs_l += rec.obs
        act_l += rec.acts
        eps.append({"day": day, "seed": s, "score": out["score"], "gpu_hours": out["gpu_hours"],
                    "slo_attainment": out["slo_attainment"], "tier_slo_attainment": out["tier_slo_attainment"],
                    "tier_ttft_p90_s": out["tier_ttft_p90_s"]})
    return obs_l, act_l, eps
