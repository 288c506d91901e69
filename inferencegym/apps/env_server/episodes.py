"""The server's whole-episode jobs: baseline rows and grader replays.

Top-level functions of plain arguments (no request objects), so an :class:`EpisodePool` can run them
in a separate, lower-priority process: an episode is seconds of pure-Python simulation, and on a
thread of the server process it would hold the GIL against every cheap route. Their results are
plain dicts.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from inferencegym.apps.env_server.environment import InferenceGymEnvironment
from inferencegym.envs.verifier import replay_grade
from inferencegym.policies import get_policy

CHILD_NICE = 19
"""Added to the episode process's niceness (capped at 19, the lowest priority): when the CPUs are
contended, whole episodes get the time the cheap routes leave (CFS weight 15 against 1024 at
nice 0), so a ``/baseline`` answer is slower on a busy machine, never an honest ``/step``."""
PARENT_POLL_S = 1.0
"""How often a worker checks that the server process still exists."""


class PolicyUnavailableError(RuntimeError):
    """A registered baseline that cannot be built for a task (e.g. data not shipped)."""


def child_init() -> None:
    """Initializer of an episode worker process: one thread for numeric libraries, lower priority,
    and it exits when the server process is gone (killed servers must not leave workers behind)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        os.nice(CHILD_NICE)
    except OSError:  # not permitted here: the process still runs, at the server's priority
        pass
    parent = os.getppid()

    def exit_with_parent() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=exit_with_parent, name="ig-exit-with-server", daemon=True).start()


def run_baseline_episode(policy_name: str, task_id: str, seed: int) -> dict[str, Any]:
    """One episode of a registry policy on the OpenEnv adapter (same env, same seed path as HTTP)."""
    try:
        policy = get_policy(policy_name, task_id)
    except ValueError as exc:
        raise PolicyUnavailableError(str(exc)) from None
    env = InferenceGymEnvironment(task_id)
    try:
        obs = env.reset(seed=seed, task_id=task_id)
        if callable(getattr(policy, "reset", None)):
            policy.reset(seed=seed)
        total = 0.0
        while not obs.done:
            action = policy.act(env.last_obs, env.last_info)
            obs = env.step(action)
            total += float(obs.reward or 0.0)
        return {"policy": policy_name, "task_id": task_id, "seed": seed, "score": obs.grade,
                "total_reward": total, "steps": env.state.step_count,
                "grade_breakdown": obs.grade_breakdown}
    finally:
        env.close()


def baseline_row(policy_name: str, task_id: str, seed: int, episodes: int) -> dict[str, Any]:
    """One ``/baseline`` row: ``episodes`` episodes from ``seed`` on."""
    seeds = [seed + i for i in range(episodes)]
    try:
        eps = [run_baseline_episode(policy_name, task_id, s) for s in seeds]
    except PolicyUnavailableError as exc:  # e.g. best_static not shipped yet
        return {"policy": policy_name, "task_id": task_id, "seeds": seeds, "scores": None,
                "score_mean": None, "error": str(exc)}
    scores = [e["score"] for e in eps]
    return {"policy": policy_name, "task_id": task_id, "seeds": seeds, "scores": scores,
            "score_mean": sum(scores) / len(scores)}


def baseline_rows(keys: list[tuple[str, str, int, int]]) -> list[dict[str, Any]]:
    """The rows of ``(policy, task_id, seed, episodes)`` keys, in order."""
    return [baseline_row(*k) for k in keys]


def replay_summary(task_id: str, seed: int, actions: list[dict[str, Any]]) -> dict[str, Any]:
    """``replay_grade`` of plain action dicts -> ``{"done", "steps", "score", "breakdown"}``
    (raises :class:`~inferencegym.envs.verifier.ReplayError` as it does)."""
    res = replay_grade(task_id, seed, actions)
    return {"done": res.done, "steps": res.steps, "score": float(res.grade),
            "breakdown": res.grade.model_dump()}


__all__ = ["PolicyUnavailableError", "run_baseline_episode", "baseline_row", "baseline_rows",
           "replay_summary", "child_init"]
