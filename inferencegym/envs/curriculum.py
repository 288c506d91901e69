"""The curriculum hook shared by both environments (``set_curriculum`` / ``curriculum``).

An env mixes in :class:`CurriculumMixin`, keeps its base task in ``self.task``, and generates each
episode's workload from :meth:`CurriculumMixin.workload_task` at ``reset``: only the workload is
scaled (``TaskSpec.scaled``); graders, SLOs and observation normalisation keep the base task.
"""

from __future__ import annotations

from typing import Any


class CurriculumMixin:
    """``set_curriculum(load_scale=, burst_scale=)`` for an env with a ``TaskSpec`` in ``self.task``."""

    _curriculum: tuple[float, float] = (1.0, 1.0)

    def set_curriculum(self, *, load_scale: float = 1.0, burst_scale: float = 1.0) -> None:
        """Scale the workload of the episodes from the next ``reset()`` on: arrival rates by
        ``load_scale``, burst and mega-prompt rates also by ``burst_scale``. Scales must be finite
        and > 0: ValueError otherwise, and nothing changes."""
        self.task.scaled(load_scale=load_scale, burst_scale=burst_scale)  # validates
        self._curriculum = (float(load_scale), float(burst_scale))

    @property
    def curriculum(self) -> tuple[float, float]:
        """Current ``(load_scale, burst_scale)`` (read-only; set with :meth:`set_curriculum`)."""
        return self._curriculum

    def workload_task(self) -> Any:
        """The task whose workload the next episode draws: the base task at the current scales."""
        load, burst = self._curriculum
        return self.task.scaled(load_scale=load, burst_scale=burst)
