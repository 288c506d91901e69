"""Train the learned autoscaler (``cluster_autoscaling``) or admission controller
(``cluster_admission``) on the training days (issue 22, item 6).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/train_control.py \\
        --rounds 3 --export-pretrained --out benchmarks/results/control/train_autoscaler.json
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/train_control.py --task cluster_admission \\
        --rounds 2 --export-pretrained --out benchmarks/results/control/train_admission.json

DAgger from the privileged ``hindsight`` ceiling (``inferencegym/rl/control.py``): round 0 rolls
the teacher on every training day (seeds 0..9, one per day), rounds 1.. roll the student (teacher
with probability ``beta``, halved each round) on further training seeds and relabel what it
visits; the MLP is cloned on all data after every round. The admission controller is trained the
same way from ``hindsight_admission`` (one level per gateway tick). Validation days (10, 11) score
each round; the exported module is the round with the best validation score.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from inferencegym.envs.control_env import ControlEnv
from inferencegym.rl.bc import bc_train
from inferencegym.rl.control import (build_module, collect_admission, collect_autoscaler, control_spaces,
                                     export_control_module, greedy_actor)
from inferencegym.rl.policy_loader import PRETRAINED_DIR
from inferencegym.tasks.control import DEFAULT_WINDOWS, day_split, load_windows


class Collector:
    """Rollouts of one task: ``collect(seeds, student, beta)`` on training days, ``validate``. The
    autoscaler may train on several windows files (``files``): seed ``s`` of a round goes to file
    ``s % len(files)`` (its day is the file's training day ``s // len(files)`` modulo their number)."""

    def __init__(self, task: str, windows: int | None, features: str = "history",
                 files: list[str] | None = None) -> None:
        self.task = task
        self.admission = task == "cluster_admission"
        self.files = files or [str(DEFAULT_WINDOWS)]
        self.split = day_split(len(load_windows(self.files[0])))
        if not self.admission:
            self.envs = [ControlEnv(task, split="train", features=features, episode_windows_override=windows,
                                    load_windows_path=f) for f in self.files]
            self.val_envs = [ControlEnv(task, split="validation", features=features,
                                        episode_windows_override=windows, load_windows_path=f) for f in self.files]
        self.features = features
        self.role = "admission" if self.admission else "autoscaler"

    def collect(self, seeds: list[int], student=None, beta: float = 1.0, split: str = "train"):
        if self.admission:
            days = self.split[split]
            return collect_admission(self.task, days_seeds=[(days[s % len(days)], s) for s in seeds],
                                     student=student, beta=beta)
        envs = self.envs if split == "train" else self.val_envs
        obs, acts, eps = [], [], []
        k = len(envs)
        for s in seeds:
            env = envs[s % k]
            day = env.days[(s // k) % len(env.days)]
            o, a, e = collect_autoscaler(env, seeds=[s], student=student, beta=beta, options={"day": day})
            obs += o
            acts += a
            eps += [{**x, "file": Path(self.files[s % k]).name} for x in e]
        return obs, acts, eps


def validate(col: Collector, module, episodes: int) -> dict:
    """``episodes`` validation episodes per windows file (seeds 5000..)."""
    n = episodes * (1 if col.admission else len(col.files))
    _, _, eps = col.collect(list(range(5000, 5000 + n)), student=greedy_actor(module), beta=0.0,
                            split="validation")
    return {"score": float(np.mean([e["score"] for e in eps])),
            "gpu_hours": float(np.mean([e["gpu_hours"] for e in eps])),
            "slo_attainment": float(np.mean([e["slo_attainment"] for e in eps])), "episodes": eps}


def export(a, col: Collector, module, hidden: list[int], best_round: int, samples: int, cpu_s: float) -> None:
    TASK = col.task
    out = Path(a.export_dir) if a.export_dir else PRETRAINED_DIR / TASK
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    export_control_module(module, tmp, task_id=TASK, role=col.role, features=col.features if not col.admission
                          else None, hidden=hidden,
                          extra={"train": {"method": "DAgger from " + ("hindsight_admission" if col.admission
                                                                       else "hindsight"),
                                           "best_round": best_round, "samples": samples,
                                           "train_cpu_s": round(cpu_s, 1), "seed": a.seed},
                                 "command": "OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python "
                                            "benchmarks/train_control.py " + " ".join(
                                                f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items()
                                                if v is not None and not isinstance(v, bool) and k not in ("out", "export_dir", "data_out"))
                                            + " --export-pretrained"})
    if out.exists():
        shutil.rmtree(out)
    tmp.replace(out)
    print(f"exported {out} (round {best_round})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="cluster_autoscaling", choices=["cluster_autoscaling", "cluster_admission"])
    ap.add_argument("--rounds", type=int, default=3, help="DAgger rounds after the teacher's round")
    ap.add_argument("--episodes-per-round", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--hidden", default="64,64")
    ap.add_argument("--load-windows", default=None, help="comma-separated ServeGen windows files to train the "
                    "autoscaler on (default: language m-large); each file's own day split")
    ap.add_argument("--features", default="history", choices=["history", "schedule", "transfer"],
                    help="the autoscaler's feature set (envs/control_features.py)")
    ap.add_argument("--val-episodes", type=int, default=2)
    ap.add_argument("--episode-windows", type=int, default=None, help="shorter episodes (smoke tests)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--export-pretrained", action="store_true")
    ap.add_argument("--export-dir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--data-out", default=None, help="write the aggregated (observation, teacher action) data "
                    "here (.npz) after every round")
    ap.add_argument("--betas", default=None, help="comma-separated teacher probability of rounds 1.. "
                    "(default 0.5, 0.25, ...)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    hidden = [int(h) for h in a.hidden.split(",")]
    TASK = a.task
    col = Collector(TASK, a.episode_windows, a.features,
                    a.load_windows.split(",") if a.load_windows else None)
    obs_space, act_space = control_spaces(TASK, col.role, a.features)
    module = build_module(obs_space, act_space, hidden, seed=a.seed)
    t0, c0 = time.time(), time.process_time()
    n_days = len(col.split["train"]) * (1 if col.admission else len(col.files))
    obs, acts, eps = col.collect(list(range(n_days)))
    log = [{"round": 0, "beta": 1.0, "teacher_train": eps, "samples": len(obs)}]
    print(f"round 0 (teacher): {len(obs)} samples, teacher train score "
          f"{np.mean([e['score'] for e in eps]):.3f}, cpu {time.process_time() - c0:.0f} s", flush=True)
    best = None
    seed = n_days
    for r in range(a.rounds + 1):
        losses = bc_train(module, obs, acts, epochs=a.epochs, lr=1e-3, minibatch_size=256, seed=a.seed + r)
        val = validate(col, module, a.val_episodes)
        log[-1].update(bc_loss=losses[-1], validation=val)
        print(f"round {r}: loss {losses[-1]:.3f}, validation score {val['score']:.3f}, GPU-h {val['gpu_hours']:.1f}, "
              f"SLO {val['slo_attainment']:.3f}, cpu {time.process_time() - c0:.0f} s", flush=True)
        if a.data_out:  # the aggregate so far (retrain offline without new rollouts)
            np.savez_compressed(a.data_out, obs=np.stack(obs), acts=np.asarray(acts, dtype=np.int64))
        if a.out:  # the log so far (a time-boxed run keeps its rounds)
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps({"task": TASK, "args": vars(a), "rounds": log}, default=float))
        if best is None or val["score"] > best[0]:
            best = (val["score"], r, {k: v.clone() for k, v in module.state_dict().items()})
            if a.export_pretrained:  # export every improvement: a time-boxed run can stop at any round
                export(a, col, module, hidden, best[1], len(obs), time.process_time() - c0)
        if r == a.rounds:
            break
        beta = float(a.betas.split(",")[r]) if a.betas else 0.5 ** (r + 1)
        seeds = list(range(seed, seed + a.episodes_per_round))
        seed += a.episodes_per_round
        o, ac, eps = col.collect(seeds, student=greedy_actor(module), beta=beta)
        obs += o
        acts += ac
        log.append({"round": r + 1, "beta": beta, "rollouts": eps, "samples": len(obs)})
    module.load_state_dict(best[2])
    result = {"task": TASK, "args": vars(a), "best_round": best[1], "best_validation_score": best[0],
              "train_wall_s": time.time() - t0, "train_cpu_s": time.process_time() - c0, "rounds": log}
    print(f"best round {best[1]} (validation {best[0]:.3f}); {result['train_cpu_s']:.0f} s CPU", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, default=float))


if __name__ == "__main__":
    main()
