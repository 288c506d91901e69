"""Silence one RLlib deprecation notice that RLlib raises against itself.

Ray 2.60's ``RLModule.__init__`` (``rl_module.py``, the line after ``# TODO (sven): Deprecate
this``) always builds the deprecated ``RLModuleConfig`` for backward compatibility, whatever the
caller passed. Our modules are built only through ``RLModuleSpec.build()`` with the new keyword
constructor (``observation_space=``, ``action_space=``, ``inference_only=``, ``model_config=``), so the
``RLModule(config=[RLModuleConfig object]) has been deprecated`` warning it logs (once per process, on
every Ray command and in every env-runner / learner process) does not describe anything we do.

``RLModuleConfig`` is wrapped in RLlib's ``@Deprecated``, which warns only when
``ray.util.log_once(<its key>)`` returns True; marking that exact key as already logged removes the
notice and nothing else (other deprecation notices, and an ``RLModule(config=...)`` error raised for a
legacy constructor, still appear). This module is imported by :mod:`inferencegym.rl.modules`, which
every process that unpickles one of our module classes imports first.
"""

from __future__ import annotations

#: The ``old=`` text of RLlib's ``@Deprecated`` decorator on ``RLModuleConfig`` (its log_once key).
RLMODULE_CONFIG_KEY = "RLModule(config=[RLModuleConfig object])"


def silence_internal_rlmodule_config_notice() -> None:
    """Mark RLlib's internal ``RLModuleConfig`` notice as already logged in this process."""
    from ray.util import log_once

    log_once(RLMODULE_CONFIG_KEY)


silence_internal_rlmodule_config_notice()
