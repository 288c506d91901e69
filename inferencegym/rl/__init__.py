"""RL training on Ray: RLlib modules, YAML configs, callbacks, BC warm start, Tune training,
policy loading and reports. Heavy imports (Ray, torch) happen in the submodules."""

from inferencegym.evaluation.control import register_control_scheme
from inferencegym.policies import register_scheme


def _load_policy(spec: str, task_id: str):
    """``checkpoint:`` / ``pretrained:`` handler of the policy registry."""
    from inferencegym.rl.policy_loader import load_policy  # lazy: Ray + torch (~5 s), only when used

    return load_policy(spec, task_id)


register_scheme("checkpoint:", _load_policy)
register_scheme("pretrained:", _load_policy)


def _load_control(spec: str, task_id: str):
    """``checkpoint:`` / ``pretrained:`` handler of the control-plane tasks (learned autoscaler / admission)."""
    from inferencegym.rl.control import load_control_policy  # lazy: Ray + torch

    return load_control_policy(spec, task_id)


register_control_scheme("checkpoint:", _load_control)
register_control_scheme("pretrained:", _load_control)
