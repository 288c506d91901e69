"""Observation and action spaces of the learned control-plane agents (``rl/control.py``), apart so
the pretrained loader (``rl/policy_loader.py``) can rebuild a module without importing the agents."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from inferencegym.envs.control_features import ADMISSION_NAMES, feature_names
from inferencegym.policies.admission import ADMISSION_LEVELS
from inferencegym.tasks.control import get_control_task



def control_spaces(task_id: str, role: str = "autoscaler", features: str = "history") -> tuple[Any, Any]:
    """(observation space, action space) of a learned control agent of ``task_id``."""
    task = get_control_task(task_id)
    if role == "autoscaler":
        n = len(feature_names(features))
        return gym.spaces.Box(-1.0, np.inf, (n,), np.float32), gym.spaces.Discrete(task.max_replicas + 1)
    if role == "admission":
        return (gym.spaces.Box(-1.0, np.inf, (len(ADMISSION_NAMES),), np.float32),
                gym.spaces.Discrete(len(ADMISSION_LEVELS)))
    raise ValueError(f"unknown control role {role!r}; valid: autoscaler, admission")
