"""History in the single-agent observation: the last K windows plus a moving average.

The single-agent env's observation describes one window. Phases that are hidden but persistent
(``adversarial_multitenant``'s tenant mix) are visible only as change over time, so the policy sees
``[obs_t, obs_{t-1}, ..., obs_{t-K+1}, ema_t]``: the last ``K`` windows (the first window repeated
before there are ``K``) and an exponential moving average with weight ``ema_weight`` per window
(trend = ``obs_t - ema_t``, longer memory than ``K``). Differences between windows (deltas) are
linear in this input, so an MLP reads them directly.

:class:`HistoryStacker` is the one implementation; :class:`HistoryObservation` applies it inside
the env for training (RLlib samples stacked observations, BC clones on them), and the policy loader
applies the same stacker to the raw observations at inference, reset at each episode.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class HistoryStacker:
    """Stacks the last ``windows`` observations of a 1-D feature vector plus their moving average."""

    def __init__(self, dim: int, windows: int, ema_weight: float = 0.3,
                 phase_task_id: str | None = None, phase_level: int = 1) -> None:
        if windows < 1:
            raise ValueError(f"history windows must be >= 1, got {windows}")
        if not 0.0 < ema_weight <= 1.0:
            raise ValueError(f"ema_weight must be in (0, 1], got {ema_weight}")
        self.dim, self.windows, self.ema_weight = int(dim), int(windows), float(ema_weight)
        self._frames: list[np.ndarray] = []
        self._ema: np.ndarray | None = None
        self.phase_task_id = phase_task_id
        """With a task id, :class:`~inferencegym.envs.phase_detector.PhaseDetector` features of that
        task's observable phase forecast follow the stack (issue 21: the actor sees the forecast the
        ``phase_rule`` baseline acts on, computed from the same observation history)."""
        self.phase_level = int(phase_level)
        """Which :meth:`~inferencegym.envs.phase_detector.PhaseDetector.features` (1 or 2)."""
        self._detector = None
        if phase_task_id is not None:
            from inferencegym.envs.phase_detector import PhaseDetector
            from inferencegym.tasks.spec import get_task

            self._detector = PhaseDetector(get_task(phase_task_id), _shipped_settings(phase_task_id))

    @property
    def out_dim(self) -> int:
        from inferencegym.envs.phase_detector import phase_feature_dim

        return self.dim * (self.windows + 1) + (phase_feature_dim(self.phase_level) if self._detector is not None else 0)

    def reset(self) -> None:
        self._frames, self._ema = [], None
        if self._detector is not None:
            self._detector.reset()

    def push(self, obs: Any) -> np.ndarray:
        """Add this window's observation; returns the stacked observation (float32)."""
        x = np.asarray(obs, dtype=np.float32).reshape(-1)
        if x.shape[0] != self.dim:
            raise ValueError(f"history expects observations of {self.dim} features, got {x.shape[0]}")
        if not self._frames:
            self._frames = [x] * self.windows
            self._ema = x.copy()
        else:
            self._frames = [x, *self._frames[:-1]]
            self._ema = (self.ema_weight * x + (1.0 - self.ema_weight) * self._ema).astype(np.float32)
        parts = [*self._frames, self._ema]
        if self._detector is not None:
            self._detector.update(x)
            parts.append(self._detector.features(self.phase_level))
        return np.concatenate(parts).astype(np.float32)


def _shipped_settings(task_id: str) -> dict[str, float]:
    """The phase detector settings shipped with ``phase_rule`` (``inferencegym/data/phase_rule.json``)."""
    import json
    from importlib import resources

    try:
        data = json.loads(resources.files("inferencegym").joinpath("data", "phase_rule.json").read_text())
    except (FileNotFoundError, ModuleNotFoundError):
        return {}
    return dict(data.get("tasks", {}).get(task_id, {}).get("settings", {}))


class HistoryObservation(gym.ObservationWrapper):
    """Env wrapper: a Box(D) observation becomes Box(D * (K + 1)) (see :class:`HistoryStacker`)."""

    def __init__(self, env: gym.Env, windows: int, ema_weight: float = 0.3,
                 phase_task_id: str | None = None, phase_level: int = 1) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"history needs a 1-D Box observation, got {space}")
        self.stacker = HistoryStacker(space.shape[0], windows, ema_weight, phase_task_id, phase_level)
        reps = windows + 1
        extra = self.stacker.out_dim - space.shape[0] * reps
        low = np.concatenate([np.tile(space.low, reps), np.full(extra, -1.0, np.float32)])
        high = np.concatenate([np.tile(space.high, reps), np.full(extra, 1.0, np.float32)])
        self.observation_space = spaces.Box(low, high, dtype=np.float32)

    def reset(self, **kwargs: Any):
        self.stacker.reset()
        return super().reset(**kwargs)

    def observation(self, observation: Any) -> np.ndarray:
        return self.stacker.push(observation)
