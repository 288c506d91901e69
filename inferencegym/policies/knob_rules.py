"""A per-replica, load-dependent knob rule for the cluster env's replica agents (issue 21, item 4).

``replica_load_knobs`` reads only the replica agent's own observation (its router-feature row:
the running batch as a share of its batch cap, and its queue) and picks one of a few knob sets by
the replica's current load, every control window:

- load = running requests + queued requests (running share x batch cap + queue x ``ref_batch``),
  read from the observation the agent is given (nothing privileged);
- ``thresholds`` (ascending, requests): load < thresholds[0] uses ``levels[0]``, ... , load >=
  thresholds[-1] uses ``levels[-1]`` (``len(levels) == len(thresholds) + 1``);
- each level is a dict of knob values (``batch_cap``, ``kv_budget_fraction``,
  ``speculation_depth``, ``chunk_size``); a knob missing from a level keeps the task's
  ``best_static_knobs`` value.

So a replica holding the hot prefixes (more running requests) gets another setting than an idle
one; speculation is the knob that pays most at low load and least at high load (draft work grows
with the batch). Settings per task are searched on training seeds
(``python -m inferencegym.evaluation.search_knob_rule``) and shipped in
``inferencegym/data/knob_rules.json``; ``load_knobs_rule`` = ``estimated_ttft+replica_load_knobs``.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

from inferencegym.envs.cluster_spaces import COL, KNOB_BUCKETS, nearest_bucket
from inferencegym.tasks.spec import get_task

KNOB_NAMES: tuple[str, ...] = ("batch_cap", "kv_budget_fraction", "speculation_depth", "chunk_size")
"""Knob keys of a level, in the replica action's order."""


def _shipped_tasks(file_name: str) -> dict:
    """``tasks`` of the packaged ``data/<file_name>`` (empty when the file is absent)."""
    try:
        text = resources.files("inferencegym").joinpath("data", file_name).read_text()
    except (FileNotFoundError, ModuleNotFoundError):
        return {}
    return json.loads(text).get("tasks", {})


def _shipped(file_name: str, task_id: str, key: str) -> dict | None:
    """``tasks[task_id][key]`` of the packaged ``data/<file_name>`` (None when absent)."""
    entry = _shipped_tasks(file_name).get(task_id)
    return None if entry is None else entry[key]


def best_static_knobs(task_id: str) -> dict | None:
    """The shipped fixed replica knobs of ``task_id`` (None when none are shipped)."""
    return _shipped("best_static_knobs.json", task_id, "knobs")


def base_knobs(task) -> dict:
    """``best_static_knobs`` of the task, or its initial knobs when none are shipped."""
    knobs = best_static_knobs(task.task_id)
    if knobs is None:
        k = task.knobs
        knobs = {"batch_cap": k.batch_cap, "kv_budget_fraction": k.kv_budget_fraction,
                 "speculation_depth": k.speculation_depth, "chunk_size": task.chunk_size_tokens}
    return dict(knobs)


AFFINITY_RULES: dict[str, str] = {"grade": "best_affinity_knobs", "p90": "best_affinity_p90"}
"""The affinity rules by search objective (their data files are ``data/<name>.json``)."""


def affinity_rule(task_id: str, objective: str = "grade") -> dict | None:
    """The shipped affinity rule of ``task_id`` searched for ``objective`` (``grade``:
    ``best_affinity_knobs``; ``p90``: ``best_affinity_p90``): ``{"affinity_s": w, "knobs": {...}}`` (the
    ``estimated_ttft_affinity`` weight and fixed replica knobs searched together on training seeds,
    ``python -m inferencegym.evaluation.search_cluster_knobs --affinity [--objective p90]``), or None."""
    entry = _shipped_tasks(f"{AFFINITY_RULES[objective]}.json").get(task_id)
    return None if entry is None else {"affinity_s": float(entry["affinity_s"]), "knobs": dict(entry["knobs"])}


def shipped_affinity_rule(task_id: str, objective: str = "grade") -> dict:
    """:func:`affinity_rule`, or a one-line ValueError naming the tasks that have one."""
    rule = affinity_rule(task_id, objective)
    if rule is None:
        name = AFFINITY_RULES[objective]
        have = sorted(_shipped_tasks(f"{name}.json"))
        if get_task(task_id).workload.process != "prefix":
            raise ValueError(f"{name} is a rule of the prefix-sharing cluster tasks (it weighs the published "
                             f"prefix cache); {task_id!r} has none: use best_static_knobs (searched: {have})")
        flag = "" if objective == "grade" else f" --objective {objective}"
        raise ValueError(f"{name} has no searched rule for task {task_id!r} (have: {have}); run python -m "
                         f"inferencegym.evaluation.search_cluster_knobs --affinity{flag} --task {task_id}")
    return rule


def shipped_knob_rule(task_id: str) -> dict | None:
    """The shipped rule of ``task_id`` (``{"thresholds": [...], "levels": [...]}``) or None."""
    return _shipped("knob_rules.json", task_id, "rule")


class LoadKnobsReplica:
    """``replica_load_knobs``: knobs by the replica's own load (module docstring). ``rule`` overrides
    the shipped one (``{"thresholds": [...], "levels": [{knob: value}, ...]}``)."""

    name = "replica_load_knobs"

    def __init__(self, rule: dict | None = None) -> None:
        self._given = rule
        self._levels: list[np.ndarray] | None = None

    def bind(self, env) -> "LoadKnobsReplica":
        base = base_knobs(env.task)
        rule = self._given if self._given is not None else shipped_knob_rule(env.task.task_id)
        if rule is None:
            rule = {"thresholds": [], "levels": [{}]}
        th = [float(x) for x in rule["thresholds"]]
        levels = list(rule["levels"])
        if len(levels) != len(th) + 1 or th != sorted(th):
            raise ValueError(f"replica_load_knobs needs ascending thresholds and one more level than "
                             f"thresholds; got thresholds {th} and {len(levels)} levels")
        bad = sorted({k for lv in levels for k in lv} - set(KNOB_NAMES))
        if bad:
            raise ValueError(f"unknown knob(s) {bad} in replica_load_knobs levels; valid: {list(KNOB_NAMES)}")
        self.rule = {"thresholds": th, "levels": levels}
        self._th = np.asarray(th, dtype=np.float64)
        self._levels = [np.array([nearest_bucket(b, {**base, **lv}[k]) for b, k in zip(KNOB_BUCKETS, KNOB_NAMES)],
                                 dtype=np.int64) for lv in levels]
        self._ref_batch = float(env.task.ref_batch)
        return self

    def reset(self, seed: int | None = None) -> None:
        pass

    def load(self, obs: np.ndarray, info: dict | None) -> float:
        """Running + queued requests of the replica, from its own observation row and current cap."""
        if not info or "knobs" not in info:
            raise ValueError("replica_load_knobs needs info['knobs'] from ClusterEnv")
        cap = KNOB_BUCKETS[0][int(info["knobs"][0])]
        o = np.asarray(obs, dtype=np.float64)
        return float(o[COL["running"]] * cap + o[COL["queue_len"]] * self._ref_batch)

    def act(self, obs: np.ndarray, info: dict | None = None) -> np.ndarray:
        if self._levels is None:
            raise ValueError("replica_load_knobs is not bound to a ClusterEnv; call policy.bind(env)")
        level = int(np.searchsorted(self._th, self.load(obs, info), side="right"))
        return self._levels[level].copy()
