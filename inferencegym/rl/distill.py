"""Teacher-student distillation from the privileged ``lookahead`` reference (issue 21).

The ``lookahead`` ceiling (:mod:`inferencegym.evaluation.lookahead`) plays ``phase_rule`` improved by
full-horizon rollouts on exact env copies with the hidden phase sequence: it is privileged twice (the
hidden phase, the simulated future) and costs 60-200 episode rollouts per episode, so it cannot be a
policy. Here it is a *teacher*: its episodes on training seeds are recorded (the raw observation of
every window and the action it played), and the history-aware student (``HistoryStacker`` with the
observable phase features, the same input the PPO actor sees) is cloned on them. The student never
sees a privileged input; it learns where the teacher's switches can be predicted from the observed
history (switching a window earlier or later than the forecast phase boundary, holding a
configuration while a queue drains), and keeps the rule's action where they cannot.

:func:`collect_lookahead` writes one ``.npz`` per (task, seed) so a long collection can be stopped and
reused; :func:`load_demonstrations` stacks them into the student's observations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferencegym.envs.actions import ServeAction, action_to_flat
from inferencegym.envs.history import HistoryStacker


def collect_lookahead(task_id: str, seeds: list[int], out_dir: str | Path, *,
                      max_rollouts: int = 400) -> list[Path]:
    """Run the lookahead teacher on ``seeds`` (training seeds: < 1000); one file per seed with the
    raw observations ``obs`` (T, D), the played flat actions ``actions`` (T, 6), the rule's
    ``base_actions`` and the episode's grade. Seeds whose file exists are skipped."""
    from inferencegym.evaluation.lookahead import lookahead_episode

    bad = [s for s in seeds if s >= 1000]
    if bad:
        raise ValueError(f"distillation uses training seeds (< 1000); got held-out seeds {bad}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in seeds:
        path = out / f"{task_id}_{seed}.npz"
        paths.append(path)
        if path.is_file():
            continue
        obs_l: list[np.ndarray] = []
        act_l: list[np.ndarray] = []
        base_l: list[np.ndarray] = []

        def record(obs: Any, played: ServeAction, base: ServeAction) -> None:
            obs_l.append(np.asarray(obs, dtype=np.float32).reshape(-1))
            act_l.append(action_to_flat(ServeAction.from_any(played)))
            base_l.append(action_to_flat(ServeAction.from_any(base)))

        ep = lookahead_episode(task_id, seed, max_rollouts=max_rollouts, on_step=record)
        tmp = path.with_name(path.stem + ".partial.npz.tmp")
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a path
            np.savez(fh, obs=np.stack(obs_l), actions=np.stack(act_l), base_actions=np.stack(base_l),
                     score=ep.score)
        tmp.replace(path)  # no half-written file if stopped
    return paths


def stack_episode(raw_obs: np.ndarray, *, windows: int, ema_weight: float, phase_task_id: str | None,
                  phase_level: int = 1) -> np.ndarray:
    """The student's observations of one episode: :class:`HistoryStacker` over the raw observations
    in order, exactly as ``HistoryObservation`` stacks them in the training env."""
    st = HistoryStacker(raw_obs.shape[1], windows, ema_weight, phase_task_id, phase_level)
    st.reset()
    return np.stack([st.push(o) for o in raw_obs])


def load_demonstrations(paths: list[Path], *, windows: int, ema_weight: float = 0.3,
                        phase_task_id: str | None = None, phase_level: int = 1,
                        ) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
    """Student observations and teacher actions of the recorded episodes, plus a summary (episodes,
    steps, the teacher's grade, the share of windows where it left the rule's action)."""
    obs: list[np.ndarray] = []
    acts: list[np.ndarray] = []
    scores, dev, steps = [], 0, 0
    for p in paths:
        d = np.load(p)
        obs += list(stack_episode(d["obs"], windows=windows, ema_weight=ema_weight, phase_task_id=phase_task_id,
                                  phase_level=phase_level))
        acts += list(d["actions"].astype(np.int64))
        dev += int(np.any(d["actions"] != d["base_actions"], axis=1).sum())
        steps += len(d["actions"])
        scores.append(float(d["score"]))
    if not obs:
        raise ValueError("no demonstrations: collect_lookahead wrote no episode files")
    return obs, acts, {"episodes": len(paths), "steps": steps, "teacher_score_mean": float(np.mean(scores)),
                       "deviation_share": dev / max(steps, 1)}


def main() -> None:
    """``python -m inferencegym.rl.distill --task T --seeds 0 12 --out DIR``: collect the teacher's
    episodes on training seeds ``first .. first + n - 1``."""
    import argparse
    import time

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--task", required=True)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(0, 8))
    ap.add_argument("--out", default="ray_results/distill")
    a = ap.parse_args()
    for s in range(a.seeds[0], a.seeds[0] + a.seeds[1]):
        t = time.perf_counter()
        (p,) = collect_lookahead(a.task, [s], a.out)
        d = np.load(p)
        print(f"{a.task} seed {s}: grade {float(d['score']):.4f}, deviations "
              f"{int(np.any(d['actions'] != d['base_actions'], axis=1).sum())}/{len(d['actions'])}, "
              f"{time.perf_counter() - t:.1f} s", flush=True)


if __name__ == "__main__":
    main()
