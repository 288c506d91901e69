"""RL training on Ray: RLlib modules, YAML configs, callbacks, BC warm start, Tune training,
policy loading and reports. Heavy imports (Ray, torch) happen in the submodules."""

from inferencegym.policies import register_scheme
from inferencegym.rl.policy_loader import load_policy

register_scheme("checkpoint:", load_policy)
register_scheme("pretrained:", load_policy)
