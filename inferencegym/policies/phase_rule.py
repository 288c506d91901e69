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

Only the observation is read (arrival rate, mean prompt; never ``info["oracle/*"]``). The table and
the detector settings are searched on training seeds (``python -m
inferencegym.evaluation.search_phase_rule``) and shipped in ``inferencegym/data/phase_rule.json``; a
task without an entry uses the clairvoyant's per-phase table with default detector settings, and a
phase missing from the table the task's best static configuration.
"""

from __future__ import annotations

from typing import Any

from inferencegym.envs.actions import ServeAction
from inferencegym.envs.phase_detector import DEFAULT_SETTINGS, PhaseDetector
from inferencegym.policies import register_policy
from inferencegym.policies.baselines import _clairvoyant_table, _data_table, best_static_action
from inferencegym.tasks.spec import get_task

__all__ = ["PhaseRulePolicy", "DEFAULT_SETTINGS", "shipped_settings"]


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

    def reset(self, seed: int | None = None) -> None:
        self.detector.reset()

    def phase_forecast(self, obs: Any) -> str:
        """Update the detector with ``obs`` (the window just served) and name the next window's phase."""
        self.detector.update(obs)
        return self.detector.forecast()

    def act(self, obs: Any, info: dict | None = None) -> ServeAction:
        name = self.phase_forecast(obs)
        a = self.by_phase.get(name)
        if a is None and "+" in name:
            a = self.by_phase.get(name.split("+", 1)[0])
        return a if a is not None else self.default


register_policy("phase_rule", lambda task_id: PhaseRulePolicy(task_id),
                "observable phase forecast (sinusoid fit / on-off filter / mega-prompt detector) + "
                "per-phase configuration table searched on training seeds (best observable rule)")
