"""InferenceGym: RL environments for LLM-inference serving on a calibrated discrete-event simulator.

Importing the package registers the Gymnasium id ``InferenceGym/LLMServe-v0`` (cheaply: the env
module is imported by ``gymnasium.make``, never here; no Ray, no torch), so both of these work::

    import gymnasium, inferencegym
    gymnasium.make("InferenceGym/LLMServe-v0", task_id="bursty_workload")
    gymnasium.make("inferencegym:InferenceGym/LLMServe-v0", task_id="bursty_workload")
"""

import gymnasium as _gym

__version__ = "0.1.0"

ENV_ID = "InferenceGym/LLMServe-v0"
"""Gymnasium id of the single-agent serving-configuration env (``inferencegym.envs.LLMServeEnv``)."""

if ENV_ID not in _gym.registry:
    _gym.register(id=ENV_ID, entry_point="inferencegym.envs.serve_env:LLMServeEnv",
                  disable_env_checker=False)
