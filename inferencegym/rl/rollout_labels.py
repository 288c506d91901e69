"""Rollout advantages: what the privileged simulator knows, as labels an observable student can learn.

The ``lookahead`` ceiling (:mod:`inferencegym.evaluation.lookahead`) picks, per window, the action whose
continuation on an exact env copy grades best on *that* seed: a hindsight choice, so cloning it
(:mod:`inferencegym.rl.distill`) teaches the student choices no observation predicts. Here the simulator
is used as an *estimator* instead: at a visited window, every candidate configuration ``a`` is played
on a ``copy.deepcopy`` of the env and ``phase_rule`` continues for ``horizon`` windows; the sum of the
per-window ``grade`` rewards is ``Q_rule(s, a)`` on this seed, and ``Q(s, a) - Q(s, rule's action)``
its advantage over the rule. One seed's advantage is hindsight too, but a regressor fitted on many
(observation, advantage) pairs estimates ``E[A | observation]``, the part of the ceiling's knowledge
that the observation carries: acting on its argmax (where it beats the rule by a margin) is a
one-step policy improvement over the rule that needs no privileged input (:mod:`inferencegym.rl.advantage_fit`).

The rollouts share the episode's future (the env copy replays the same arrivals), so candidates are
compared on common random numbers: the advantages are exact for the seed, their noise across seeds is
what the regressor averages. Training seeds only (< 1000). One ``.npz`` per (task, seed), written
atomically, so a collection can be stopped and resumed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inferencegym.envs.actions import ServeAction, action_to_flat
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies import get_policy

GRADE_REWARD = {"w_grade": 1.0, "w_throughput": 0.0, "w_slo": 0.0, "w_kv_band": 0.0, "w_preemption": 0.0,
                "w_cost": 0.0, "w_quality": 0.0}
"""The per-window reward the advantages sum: the grader split into windows (``grade``), alone."""


def candidate_actions(task_id: str, tables: Sequence[str] = ("phase_rule",)) -> list[ServeAction]:
    """The configurations compared at each window: every entry of the ``tables`` policies' per-phase
    tables, completed to the product of the values of every knob on which they
    differ, deduplicated in a fixed order (``adversarial_multitenant``: split x KV budget, 4;
    ``bursty_workload``: split x KV budget x quantization, 8)."""
    acts: list[ServeAction] = []
    for name in tables:
        p = get_policy(name, task_id)
        acts += list(getattr(p, "by_phase", {}).values())
    acts = list(dict.fromkeys(acts))
    if not acts:
        raise ValueError(f"no per-phase table in {list(tables)} for task {task_id!r}; use a table policy "
                         f"such as phase_rule")
    fields = list(type(acts[0]).model_fields)
    values = {f: list(dict.fromkeys(getattr(a, f) for a in acts)) for f in fields}
    out = [acts[0]]
    for f in fields:
        if len(values[f]) > 1:
            out = [a.model_copy(update={f: v}) for a in out for v in values[f]]
    return list(dict.fromkeys([*acts, *out]))


def rollout_return(env: LLMServeEnv, first: ServeAction, rule: Any, horizon: int) -> float:
    """Sum of rewards of ``first`` then ``rule`` for ``horizon`` windows (fewer at the episode's end);
    ``rule.act`` may answer any form :meth:`ServeAction.from_any` takes (a loaded module's dict too)."""
    total, a = 0.0, first
    for _ in range(horizon):
        obs, r, term, trunc, info = env.step(a)
        total += float(r)
        if term or trunc:
            break
        a = ServeAction.from_any(rule.act(obs, info))
    return total


def label_episode(task_id: str, seed: int, *, actor: Callable[[Any, dict], Any] | None = None,
                  horizon: int = 20, every: int = 2, candidates: Sequence[ServeAction] | None = None,
                  episode_windows: int | None = None) -> dict[str, np.ndarray]:
    """One episode played by ``actor`` (raw observation, info -> action; default ``phase_rule``) with
    the rollout values of every candidate at every ``every``-th window (NaN rows elsewhere).

    Returns ``obs`` (T, D) raw observations, ``q`` (T, C) rollout values, ``rule`` (T,) the index of
    ``phase_rule``'s action among the candidates (-1 when it is not one), ``played`` (T, 6) flat
    actions, and ``score`` (the episode's grade)."""
    if seed >= 1000:
        raise ValueError(f"rollout labels use training seeds (< 1000); got held-out seed {seed}")
    if horizon < 1 or every < 1:
        raise ValueError(f"horizon and every must be >= 1; got horizon={horizon}, every={every}")
    cands = list(candidates) if candidates is not None else candidate_actions(task_id)
    index = {a: i for i, a in enumerate(cands)}
    env = LLMServeEnv(task_id, reward_config=GRADE_REWARD, episode_windows=episode_windows)
    rule = get_policy("phase_rule", task_id)
    rule.reset(seed)
    obs, info = env.reset(seed=seed)
    obs_l, q_l, rule_l, played_l = [], [], [], []
    w = 0
    while True:
        before = copy.deepcopy(rule)
        a_rule = rule.act(obs, info)
        q = np.full(len(cands), np.nan)
        if w % every == 0:
            for i, c in enumerate(cands):
                r = copy.deepcopy(before)
                r.act(obs, info)  # the continuation has read this window, whatever is played
                q[i] = rollout_return(copy.deepcopy(env), c, r, horizon)
        a = ServeAction.from_any(actor(obs, info)) if actor is not None else a_rule
        obs_l.append(np.asarray(obs, dtype=np.float32).reshape(-1))
        q_l.append(q)
        rule_l.append(index.get(a_rule, -1))
        played_l.append(action_to_flat(a))
        obs, _, term, trunc, info = env.step(a)
        w += 1
        if term or trunc:
            break
    return {"obs": np.stack(obs_l), "q": np.stack(q_l), "rule": np.asarray(rule_l, np.int64),
            "played": np.stack(played_l), "score": np.float64(env.grade().score)}


def collect(task_id: str, seeds: Sequence[int], out_dir: str | Path, *, tag: str = "rule",
            actor_factory: Callable[[], Callable[[Any, dict], Any]] | None = None,
            on_done: Callable[[int, dict], None] | None = None, **kw: Any) -> list[Path]:
    """:func:`label_episode` for each seed, one ``<task>_<tag>_<seed>.npz`` per seed in ``out_dir``
    (skipped when present; written through a temporary file, so a stopped run leaves none half
    written). ``actor_factory`` builds a fresh actor per episode (DAgger rounds: the student)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in seeds:
        path = out / f"{task_id}_{tag}_{seed}.npz"
        paths.append(path)
        if path.is_file():
            continue
        d = label_episode(task_id, seed, actor=actor_factory() if actor_factory else None, **kw)
        tmp = path.with_name(path.stem + ".partial.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, **d)
        tmp.replace(path)
        if on_done is not None:
            on_done(seed, d)
    return paths


def main() -> None:
    """``python -m inferencegym.rl.rollout_labels --task T --seeds FIRST N --out DIR``: label ``phase_rule``'s
    episodes on training seeds ``FIRST .. FIRST + N - 1``."""
    import argparse
    import time

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--task", required=True)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(100, 16))
    ap.add_argument("--out", default="ray_results/rollout_labels")
    ap.add_argument("--horizon", type=int, default=20, help="windows each candidate's rollout lasts")
    ap.add_argument("--every", type=int, default=2, help="label every k-th window")
    a = ap.parse_args()
    t0 = [time.perf_counter()]

    def done(seed: int, d: dict) -> None:
        adv = d["q"] - np.take_along_axis(d["q"], np.maximum(d["rule"], 0)[:, None], axis=1)
        rows = ~np.isnan(adv).any(axis=1)
        print(f"{a.task} seed {seed}: grade {float(d['score']):.4f}, labelled {int(rows.sum())} windows, "
              f"rule not best on {int((adv[rows].max(axis=1) > 1e-9).sum())}, "
              f"{time.perf_counter() - t0[0]:.1f} s", flush=True)
        t0[0] = time.perf_counter()

    collect(a.task, list(range(a.seeds[0], a.seeds[0] + a.seeds[1])), a.out, horizon=a.horizon, every=a.every,
            on_done=done)


if __name__ == "__main__":
    main()
