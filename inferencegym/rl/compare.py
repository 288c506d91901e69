"""Evaluate a trained policy against the baselines with the env package's evaluation machinery.

Rows have the ``inferencegym evaluate --json`` shape (``policy, task, episodes, seeds, score_mean,
score_ci95, ttft_p99_s, ...``); cluster tasks go through ``evaluate_cluster_policy`` and single-agent
tasks through ``evaluate_policy``, with the same seeds for every policy.
"""

from __future__ import annotations

from typing import Any, Callable

from inferencegym.evaluation.cluster import evaluate_cluster_policy
from inferencegym.evaluation.single import evaluate_policy
from inferencegym.tasks import get_task

DEFAULT_BASELINES = {
    "single": ["static_default", "heuristic", "best_static"],
    "cluster": ["round_robin", "least_outstanding_requests", "estimated_ttft"],
}


def task_kind(task_id: str) -> str:
    return "cluster" if get_task(task_id).kind == "cluster" else "single"


def evaluate_one(policy: Any, task_id: str, *, episodes: int, seed: int, name: str | None = None,
                 on_episode: Callable[[], None] | None = None) -> dict[str, Any]:
    """One policy (registry name or object with ``act``) on ``episodes`` seeds from ``seed``."""
    if task_kind(task_id) == "cluster":
        row = evaluate_cluster_policy(policy, task_id, episodes=episodes, seed=seed,
                                      progress=(lambda i: on_episode()) if on_episode else None)
    else:
        res = evaluate_policy(policy, task_id, episodes=episodes, seed=seed, policy_name=name,
                              on_episode=(lambda ep: on_episode()) if on_episode else None)
        row = res.to_json_dict()
    if name:
        row["policy"] = name
    return row


def compare(policy: Any, task_id: str, *, name: str, baselines: list[str] | None = None,
            episodes: int = 20, seed: int = 1000, progress: bool = True) -> list[dict[str, Any]]:
    """The trained ``policy`` and each baseline on the same seeds; one row per policy."""
    from rich.progress import Progress

    base = list(baselines) if baselines is not None else DEFAULT_BASELINES[task_kind(task_id)]
    entries = [(name, policy)] + [(b, b) for b in base]
    rows = []
    with Progress(disable=not progress, transient=True) as prog:
        bar = prog.add_task(f"evaluate {task_id}", total=episodes * len(entries))
        for label, pol in entries:
            rows.append(evaluate_one(pol, task_id, episodes=episodes, seed=seed, name=label,
                                     on_episode=lambda: prog.advance(bar)))
    return rows
