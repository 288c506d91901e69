"""The verifier: grade a submitted episode by replaying its actions, never from a client's figures.

The simulator is deterministic (one seed -> bit-identical episode), so an episode is fully described
by ``(task_id, seed, actions)``. :func:`replay_grade` rebuilds the task's env (unprivileged, exactly
as an agent gets it), resets it with the seed, applies the actions in order and grades the log the
env itself wrote. A client can therefore only ever be graded on what its actions really do; a
forged metric (offered = good tokens, zero cost, infinite tokens) has nowhere to go.

Bounds: at most the task's ``episode_windows`` actions (more is an error), every action validated as
a :class:`~inferencegym.envs.actions.ServeAction` (strict: ``"64"`` or ``true`` is not a number).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from inferencegym.envs.actions import InvalidActionError, ServeAction
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.tasks.graders import GradeResult
from inferencegym.tasks.spec import get_task

MAX_SEED = 2**32 - 1
"""Largest seed accepted (numpy's SeedSequence takes any int; the HTTP API uses 32 bits)."""


class ReplayError(ValueError):
    """A submission that cannot be replayed (unknown task, bad seed, too many or invalid actions)."""


@dataclass(frozen=True, kw_only=True)
class VerifiedReplay:
    """The grade of a replayed episode."""

    grade: GradeResult
    """The grader's result on the env's own log."""
    steps: int
    """Actions applied (windows played)."""
    done: bool
    """Whether the episode is complete (``steps == episode_windows``); otherwise graded so far."""


def replay_grade(task_id: str, seed: int, actions: Sequence[Any]) -> VerifiedReplay:
    """Replay ``actions`` from ``seed`` on ``task_id``'s env and grade the env's own log.

    Raises :class:`ReplayError` naming what was wrong before any simulation runs."""
    try:
        task = get_task(task_id)
    except (KeyError, ValueError) as exc:
        raise ReplayError(str(exc)) from None
    if task.kind != "single":
        raise ReplayError(f"task {task_id!r} is a {task.kind} task; replay grading covers the "
                          f"single-agent tasks")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ReplayError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r}")
    if len(actions) > task.episode_windows:
        raise ReplayError(f"{len(actions)} actions given; an episode of {task_id!r} has "
                          f"{task.episode_windows} windows")
    parsed: list[ServeAction] = []
    for i, a in enumerate(actions):
        try:
            parsed.append(ServeAction.from_any(a))
        except InvalidActionError as exc:
            raise ReplayError(f"actions[{i}]: {exc}") from None

    env = LLMServeEnv(task.task_id)  # never privileged: the agent's own view
    env.reset(seed=seed)
    for a in parsed:
        env.step(a)
    return VerifiedReplay(grade=env.grade(), steps=len(parsed), done=len(parsed) == task.episode_windows)


__all__ = ["replay_grade", "VerifiedReplay", "ReplayError", "MAX_SEED"]
