"""InferenceGym: RL environments for LLM-inference serving on a calibrated discrete-event simulator.

Importing the package registers the Gymnasium id ``InferenceGym/LLMServe-v0`` (cheaply: the env
module is imported by ``gymnasium.make``, never here; no Ray, no torch), so both of these work::

    import gymnasium, inferencegym
    gymnasium.make("InferenceGym/LLMServe-v0", task_id="bursty_workload")
    gymnasium.make("inferencegym:InferenceGym/LLMServe-v0", task_id="bursty_workload")

Gymnasium itself is not imported here (~0.1 CPU s that the simulator and the ``simulate`` command
do not need): when it is already imported the id is registered at once, otherwise right after
Gymnasium's own import finishes (a one-shot import hook), in whichever order the two come.
"""

import importlib.abc
import importlib.util
import sys

from inferencegym import accel as _accel

_accel.install()  # the compiled simulator core when built and current (inferencegym/accel), else nothing

__version__ = "0.1.0"

ENV_ID = "InferenceGym/LLMServe-v0"
"""Gymnasium id of the single-agent serving-configuration env (``inferencegym.envs.LLMServeEnv``)."""


def _register(gym) -> None:
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="inferencegym.envs.serve_env:LLMServeEnv",
                     disable_env_checker=False)


class _RegisterAfterGymnasium(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps Gymnasium's loader once so that the id is registered after it."""

    def find_spec(self, name, path=None, target=None):
        if name != "gymnasium":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        inner = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                module.__spec__.loader = inner
                module.__loader__ = inner
                _register(module)

        spec.loader = _Loader()
        return spec


if "gymnasium" in sys.modules:
    _register(sys.modules["gymnasium"])
elif not any(isinstance(f, _RegisterAfterGymnasium) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterGymnasium())
