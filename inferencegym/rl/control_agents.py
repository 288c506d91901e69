"""Policies and PPO for the agents of the control-plane ``MultiAgentEnv``
(``envs/control_cluster_env.py``: autoscaler, admission, router, replica agents).

* :func:`make_control_env` (registered with Tune as ``CONTROL_ENV``): the env with controllers given
  by name: ``config["autoscaler"]`` = ``"agent"`` or a rule of ``policies/autoscalers.py``
  (``hpa``, ``kpa``, ``wva``, ``dynamo_planner``, ``scheduled``) or a learned spec
  (``pretrained:cluster_autoscaling``, ``checkpoint:PATH``); ``config["admission"]`` = ``"agent"``,
  a rule of ``policies/admission.py`` (``admit_all``, ``gaie_shed``, ``token_bucket``) or
  ``pretrained:cluster_admission``. A named controller acts inside the env; ``"agent"`` makes it an
  agent of the env.
* :func:`agent_policy`: a policy ``act(obs) -> action`` for the ``autoscaler`` or ``admission``
  agent from the same names, so the rules and the shipped learned controllers drive the agents
  (a rule reads the env's fleet, exactly what it reads inside ``evaluate``; a learned module reads
  the agent's observation vector).
* :func:`control_ppo_config`: RLlib PPO over the env's agents, one module per role (``autoscaler``
  and ``admission``: MLPs, the learned controllers' architecture, optionally warm-started from a
  shipped module; ``router``: the cross-replica attention router, which leaves absent slots out;
  ``replica``: one module shared by every replica agent).
"""

from __future__ import annotations

from typing import Any

from inferencegym.envs.control_cluster_env import ControlClusterEnv
from inferencegym.envs.control_spaces import ADMISSION, AUTOSCALER, ROUTER
from inferencegym.policies.admission import ADMISSION as ADMISSION_RULES
from inferencegym.policies.admission import make_admission
from inferencegym.policies.autoscalers import AUTOSCALERS, PRIVILEGED, make_autoscaler

CONTROL_ENV = "inferencegym_control"
"""Tune name of :func:`make_control_env`."""
ROLES = (AUTOSCALER, ADMISSION, ROUTER, "replica")
"""Module ids of :func:`control_ppo_config` (every ``replica_i`` maps to ``replica``)."""


def _learned(spec: str, task_id: str) -> Any:
    from inferencegym.rl.control import load_control_policy

    return load_control_policy(spec, task_id)


def controller(role: str, name: str, task_id: str) -> Any:
    """A named autoscaler / admission controller object (as ``evaluate`` builds it)."""
    if ":" in name:
        return _learned(name, task_id)
    if role == AUTOSCALER:
        if name in PRIVILEGED or name not in AUTOSCALERS:
            raise ValueError(f"autoscaler {name!r}: use 'agent', a learned spec or one of "
                             f"{', '.join(n for n in AUTOSCALERS if n not in PRIVILEGED)}")
        return make_autoscaler(name)
    if name not in ADMISSION_RULES or getattr(ADMISSION_RULES[name], "privileged", False):
        raise ValueError(f"admission {name!r}: use 'agent', a learned spec or one of "
                         f"{', '.join(n for n, c in ADMISSION_RULES.items() if not getattr(c, 'privileged', False))}")
    return make_admission(name)


def make_control_env(env_config: dict | None = None) -> ControlClusterEnv:
    """``ControlClusterEnv`` with its non-agent controllers resolved from names."""
    cfg = dict(env_config or {})
    task_id = cfg.get("task_id", "cluster_autoscaling")
    for role in (AUTOSCALER, ADMISSION):
        v = cfg.get(role)
        if isinstance(v, str) and v != "agent":
            cfg[role] = controller(role, v, task_id)
    return ControlClusterEnv(cfg)


class RuleAgent:
    """A rule autoscaler as the ``autoscaler`` agent's policy: it reads the env's fleet
    (``ControlObs``) as it does inside ``evaluate``; reset on every new episode of ``env``."""

    def __init__(self, rule: Any, env: ControlClusterEnv) -> None:
        self.rule, self.env, self._fleet = rule, env, None

    def act(self, obs: Any) -> int:
        if self.env.fleet is not self._fleet:
            self._fleet = self.env.fleet
            self.rule.reset(self.env.ctx)
        return int(self.rule.act(self.env.fleet.observe()))


class ModuleAgent:
    """A learned controller's module as its agent's policy (greedy on the agent's observation)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def act(self, obs: Any) -> int:
        return int(self.policy.act(obs))


def agent_policy(agent_id: str, name: str, env: ControlClusterEnv) -> Any:
    """``act(obs) -> action`` for the ``autoscaler`` or ``admission`` agent of ``env`` from a name:
    a rule autoscaler, or a learned spec (its feature set must be the env's)."""
    task_id = env.task.task_id
    if agent_id not in (AUTOSCALER, ADMISSION):
        raise ValueError(f"agent_policy covers the autoscaler and admission agents, not {agent_id!r}")
    if ":" in name:
        pol = _load(name, task_id)
        feats = (getattr(pol, "meta", {}).get("control") or {}).get("features")
        if agent_id == AUTOSCALER and feats and feats != env.features:
            raise ValueError(f"{name} reads the {feats!r} features; build the env with "
                             f"autoscaler_features={feats!r} (it has {env.features!r})")
        return ModuleAgent(pol)
    if agent_id == ADMISSION:
        raise ValueError(f"admission rules decide per request, not one level per tick: pass "
                         f"admission={name!r} in the env config (it then acts inside the env)")
    return RuleAgent(controller(AUTOSCALER, name, task_id), env)


def control_ppo_config(env_config: dict, *, warm_start: dict[str, str] | None = None, lr: float = 1e-4,
                       train_batch_size: int = 256, minibatch_size: int = 64, epochs: int = 1,
                       kl_coeff: float = 0.2, seed: int = 0) -> Any:
    """PPO over every agent of ``make_control_env(env_config)`` (one env runner in the driver).
    ``warm_start``: agent role -> learned spec whose module weights initialise that role's module."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.tune.registry import register_env

    from inferencegym.rl.modules import MLPModule, ReplicaAgentModule, ReplicaAttentionRouter

    register_env(CONTROL_ENV, make_control_env)
    probe = make_control_env(env_config)
    specs, mapping = {}, {}
    classes = {AUTOSCALER: (MLPModule, {"hidden": [64, 64]}), ADMISSION: (MLPModule, {"hidden": [64, 64]}),
               ROUTER: (ReplicaAttentionRouter, {}), "replica": (ReplicaAgentModule, {})}
    for aid in probe.possible_agents:
        role = "replica" if aid.startswith("replica_") else aid
        mapping[aid] = role
        if role not in specs:
            cls, mc = classes[role]
            specs[role] = RLModuleSpec(module_class=cls, observation_space=probe.observation_spaces[aid],
                                       action_space=probe.action_spaces[aid], model_config=mc)
    for role, spec in (warm_start or {}).items():
        if role not in specs:
            raise ValueError(f"warm_start for {role!r}, which is not an agent of this env ({sorted(specs)})")
        specs[role] = _warm_spec(specs[role], spec, probe.task.task_id)
    cfg = (PPOConfig()
           .environment(CONTROL_ENV, env_config=env_config)
           .env_runners(num_env_runners=0, num_envs_per_env_runner=1, rollout_fragment_length="auto")
           .learners(num_learners=0)
           .multi_agent(policies=set(specs), policy_mapping_fn=lambda aid, *a, **k: mapping[aid],
                        count_steps_by="env_steps")
           .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
           .training(lr=lr, train_batch_size_per_learner=train_batch_size, minibatch_size=minibatch_size,
                     num_epochs=epochs, kl_coeff=kl_coeff, clip_param=0.1)
           .debugging(seed=seed))
    return cfg


def _warm_spec(spec: Any, name: str, task_id: str) -> Any:
    """``spec`` with the architecture and weights of the learned module ``name``."""
    return warm_module_spec(_load(name, task_id).module, spec.observation_space, spec.action_space,
                            source=name)


def _load(name: str, task_id: str) -> Any:
    """A learned spec's module policy: ``pretrained:TASK``, an RLlib ``checkpoint:PATH`` or a
    ``checkpoint:DIR`` exported by the control training scripts (``module.json``)."""
    from pathlib import Path

    from inferencegym.rl.policy_loader import load_exported, load_policy

    path = Path(name.partition(":")[2]).expanduser()
    if name.startswith("checkpoint:") and (path / "module.json").is_file():
        return load_exported(path, task_id)
    return load_policy(name, task_id)


def warm_module_spec(src: Any, observation_space: Any, action_space: Any, *, source: str = "module") -> Any:
    """An ``RLModuleSpec`` whose module starts as a copy of the built module ``src`` (a warm start:
    same class, model config and weights; value head included)."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    if src.observation_space.shape != observation_space.shape or src.action_space != action_space:
        raise ValueError(f"{source} maps {src.observation_space.shape} observations to {src.action_space}; "
                         f"the agent has {observation_space.shape} and {action_space} "
                         f"(autoscaler_features and the task's max_replicas must match)")
    state = {k: v.clone() for k, v in src.state_dict().items()}

    class Warm(type(src)):
        def setup(self) -> None:
            super().setup()
            self.load_state_dict(state)

    Warm.__name__ = f"Warm{type(src).__name__}"
    return RLModuleSpec(module_class=Warm, observation_space=observation_space, action_space=action_space,
                        model_config=dict(src.model_config))
