"""Issue 16: frame stacking or an LSTM? PPO from scratch (no behaviour cloning, so every arm starts
equal) with the same env-step budget per arm, one arm after another in one process:

- ``mlp K=0``: the shipped MLP on the current window only;
- ``mlp K=4``: the shipped frame stacking (``history_windows: 4``: the last 4 windows + a moving
  average, envs/history.py);
- ``lstm``: RLlib's default PPO module with ``use_lstm=True`` (``type: lstm``) on the current window.

Everything else is the task's shipped config (PPO settings, curriculum, safety, fine-tuning terms;
the teacher KL is inert without a warm start). Each returned policy (the last checkpoint: no
selection, so no arm gets a pick of its checkpoints) is evaluated greedily on the same seeds, with
``best_static`` on those seeds as the reference; paired differences with 95% t-intervals.

    OMP_NUM_THREADS=1 python benchmarks/history_vs_lstm.py --steps 100000 --episodes 10 --seed 1000 \\
        --out benchmarks/results/history_vs_lstm.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from inferencegym.rl.compare import evaluate_one  # noqa: E402
from inferencegym.rl.config import load_config  # noqa: E402
from inferencegym.rl.policy_loader import load_checkpoint  # noqa: E402
from inferencegym.rl.train import run_training  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARMS: dict[str, list[str]] = {
    "mlp K=0": ["modules.default_policy.model_config={hidden: [64, 64], history_windows: 0}"],
    "mlp K=4": ["modules.default_policy.model_config={hidden: [64, 64], history_windows: 4}"],
    "lstm": ["modules.default_policy.type=lstm", "modules.default_policy.model_config={}"],
}


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean of ``a - b`` over paired seeds, its 95% t half-width, and the seeds where ``a`` is higher."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = len(d)
    half = float(stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return {"mean": round(float(d.mean()), 4), "ci95": round(half, 4), "better": int((d > 0).sum()), "n": n}


def run_arm(name: str, sets: list[str], args: argparse.Namespace, storage: Path) -> dict:
    tag = name.replace(" ", "_").replace("=", "")
    cfg = load_config(REPO / "rllib_configs" / f"{args.task}.yaml").with_overrides(
        steps=args.steps, seed=args.train_seed,
        sets=["bc.enabled=false", "mlflow.enabled=false", f"stop.time_total_s={args.minutes * 60}",
              f"name=history_vs_lstm_{tag}", *sets, *args.sets])
    load0 = os.getloadavg()[0]
    out = run_training(cfg, storage_path=storage, progress=False)
    m = out.metrics
    steps = int(m.get("num_env_steps_sampled_lifetime") or 0)
    t = float(m.get("time_total_s") or 0.0)
    pol = load_checkpoint(out.checkpoint, args.task)
    t_eval = time.perf_counter()
    row = evaluate_one(pol, args.task, episodes=args.episodes, seed=args.seed, name=name)
    er = m.get("env_runners", {}) or {}
    rec = {"arm": name, "type": cfg.modules["default_policy"].type,
           "model_config": dict(cfg.modules["default_policy"].model_config_),
           "params": int(sum(p.numel() for p in pol.module.parameters())),
           "env_steps": steps, "iterations": m.get("training_iteration"), "train_time_s": round(t, 1),
           "wall_s": round(out.wall_s, 1), "env_steps_per_s": round(steps / t, 1) if t > 0 else None,
           "train_grade_last": er.get("grade/score"), "eval_s": round(time.perf_counter() - t_eval, 1),
           "loadavg_1m_start": round(load0, 2), "loadavg_1m_end": round(os.getloadavg()[0], 2),
           "score_mean": row["score_mean"], "score_ci95": row["score_ci95"], "scores": row["scores"],
           "ttft_p99_s": row.get("ttft_p99_s")}
    print(json.dumps({k: v for k, v in rec.items() if k != "scores"}), flush=True)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="adversarial_multitenant")
    ap.add_argument("--steps", type=int, default=100_000, help="env-step budget of every arm")
    ap.add_argument("--minutes", type=float, default=30.0, help="wall-clock cap per arm (the steps should decide)")
    ap.add_argument("--episodes", type=int, default=10, help="evaluation seeds per policy")
    ap.add_argument("--seed", type=int, default=1000, help="first evaluation seed (1000..: held-out)")
    ap.add_argument("--train-seed", type=int, default=0)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override for every arm")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    ref = evaluate_one("best_static", args.task, episodes=args.episodes, seed=args.seed, name="best_static")
    print(f"best_static {ref['score_mean']:.3f} ± {ref['score_ci95']:.3f}", flush=True)
    arms: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="history_vs_lstm_") as tmp:
        for name in args.arms:
            arms.append(run_arm(name, ARMS[name], args, Path(tmp)))
            write(args, ref, arms)  # after every arm: a later one that does not finish loses only itself
    write(args, ref, arms, show=True)


def write(args: argparse.Namespace, ref: dict, arms: list[dict], show: bool = False) -> None:
    by = {a["arm"]: a["scores"] for a in arms}
    comparisons = {f"{a} - best_static": paired(s, ref["scores"]) for a, s in by.items()}
    for a, b in (("mlp K=4", "mlp K=0"), ("lstm", "mlp K=0"), ("lstm", "mlp K=4")):
        if a in by and b in by:
            comparisons[f"{a} - {b}"] = paired(by[a], by[b])
    if show:
        for k, v in comparisons.items():
            print(f"{k}: {v['mean']:+.3f} ± {v['ci95']:.3f} (higher on {v['better']}/{v['n']})", flush=True)
    record = {"command": "OMP_NUM_THREADS=1 python " + shlex.join(sys.argv), "task": args.task,
              "steps": args.steps, "eval_seeds": [args.seed, args.seed + args.episodes - 1],
              "best_static": {"score_mean": ref["score_mean"], "score_ci95": ref["score_ci95"], "scores": ref["scores"]},
              "arms": arms, "paired": comparisons}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
