"""``phase_rule``: the best observable rule of the phased single-agent tasks (issue 21).

The hidden phase of ``bursty_workload`` (Markov on/off) and ``adversarial_multitenant`` (a 60-s
sinusoid with mega-prompts in its quiet half) is not in the observation, but the task's *public*
workload spec (``TaskSpec.workload``: rates, period, amplitude, on/off means, prompt clip) says how
it shapes the arrivals the observation does show. The rule forecasts the next window's phase from
the observation history and applies a per-phase configuration table:

- ``sinusoidal`` (detector: ``inferencegym.envs.phase_detector``): maximum-likelihood phase offset of the published sinusoid given the (mega-free)
  arrival counts seen so far (Poisson log-likelihood on a grid of offsets), evaluated at the next
  window's middle (plus ``lead_windows``); ``high`` when its sine exceeds the task's threshold plus
  ``threshold_shift``. A window whose mean prompt exceeds the prompt clip held a mega-prompt (the
  only prompts above the clip): ``+mega`` while one arrived in the last ``mega_hold_windows``.
- ``onoff``: a forward filter of the two-state Markov chain (exponential ON/OFF periods with the
  published means, Poisson arrivals at the published rates), predicted one window ahead; ``on`` when
  the probability exceeds ``on_threshold``.
- any other process: one phase (``steady``).

A backlog hold (setting ``backlog_hold_requests``, ``onoff`` tasks; absent = off): when the forecast
drops from ``on`` to ``off`` while more than that many requests still wait in the queue (the
observation's ``queue_depth``), the rule keeps the ``on`` configuration until the queue has drained
to it: the burst's backlog is still served at the burst's speed (sixth session: +0.0027 ± 0.0015 on
80 training seeds; docs/bench/issue21.md). The phase forecast itself (and the learned policies'
phase features) is unchanged.

Only the observation is read (arrival rate, mean prompt; never ``info["oracle/*"]``). The table and
the detector settings are searched on training seeds (``python -m
inferencegym.evaluation.search_phase_rule``) and shipped in ``inferencegym/data/phase_rule.json``; a
task without an entry uses the clairvoyant's per-phase table with default detector settings, and a
phase missing from the table the task's best static configuration.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inferencegym.envs.actions import ServeAction
from inferencegym.envs.phase_detector import DEFAULT_SETTINGS, PhaseDetector
from inferencegym.envs.serve_env import OBS_FEATURES
from inferencegym.policies import register_policy
from inferencegym.policies.baselines import _clairvoyant_table, _data_table, best_static_action
from inferencegym.tasks.spec import get_task

__all__ = ["PhaseRulePolicy", "DEFAULT_SETTINGS", "shipped_settings"]

_QUEUE = OBS_FEATURES.index("queue_depth")


def shipped_settings(task_id: str) -> dict[str, float]:
    """The detector settings shipped for ``task_id`` (defaults where none)."""
    shipped = _data_table("phase_rule.json").get("tasks", {}).get(task_id, {})
    return {**DEFAULT_SETTINGS, **shipped.get("settings", {})}


class PhaseRulePolicy:
    """Observable phase forecast (:class:`inferencegym.envs.phase_detector.PhaseDetector`) +
    per-phase configuration table (see the module docstring)."""

    def __init__(self, task_id: str, table: dict[str, Any] | None = None,
                 settings: dict[str, float] | None = None):
        self.task = get_task(task_id)
        self.default = best_static_action(task_id)
        shipped = _data_table("phase_rule.json").get("tasks", {}).get(task_id, {})
        if table is None:
            table = shipped.get("phases") or \
                _clairvoyant_table().get("tasks", {}).get(task_id, {}).get("phases", {})
        self.by_phase = {k: v if isinstance(v, ServeAction) else ServeAction(**v) for k, v in table.items()}
        self.settings = {**shipped_settings(task_id), **(settings or {})}
        self.detector = PhaseDetector(self.task, self.settings)
        self.backlog_hold = float(self.settings.get("backlog_hold_requests", math.inf))
        if not self.backlog_hold >= 0:
            raise ValueError(f"backlog_hold_requests must be >= 0 (queued requests), got {self.backlog_hold!r}")
        self._holding_on = False   # the rule's last choice was the "on" configuration

    def reset(self, seed: int | None = None) -> None:
        self.detector.reset()
        self._holding_on = False

    def phase_forecast(self, obs: Any) -> str:
        """Update the detector with ``obs`` (the window just served) and name the next window's phase."""
        self.detector.update(obs)
        return self.detector.forecast()

    def _hold(self, name: str, obs: Any) -> str:
        """The backlog hold (module docstring): ``on`` while a burst's queue drains, else ``name``."""
        if self.detector.k == 0:          # a new episode (the detector restarted)
            self._holding_on = False
        if self.detector.process == "onoff" and self.backlog_hold < math.inf:
            if name == "off" and self._holding_on:
                queued = float(np.asarray(obs, dtype=np.float64)[_QUEUE]) * self.task.ref_batch
                if queued > self.backlog_hold:
                    name = "on"
            self._holding_on = name == "on"
        return name

    def act(self, obs: Any, info: dict | None = None) -> ServeAction:
        name = self._hold(self.phase_forecast(obs), obs)
        a = self.by_phase.get(name)
        if a is None and "+" in name:
            a = self.by_phase.get(name.split("+", 1)[0])
        return a if a is not None else self.default


register_policy("phase_rule", lambda task_id: PhaseRulePolicy(task_id),
                "observable phase forecast (sinusoid fit / on-off filter / mega-prompt detector) + "
                "per-phase configuration table searched on training seeds (best observable rule)")
