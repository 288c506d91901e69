"""Greedy validation-day episodes of autoscalers (issue 22 item 6: which module ships).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/validate_control.py \\
        --policies pretrained:cluster_autoscaling,scheduled --episodes 4 --out val.json

Episodes are ``ControlEnv(split="validation")`` seeds 5000.. (validation days 10 / 11 alternating),
the ones ``benchmarks/train_control.py`` selects its round on. A policy is a rule name, a learned
spec (``pretrained:cluster_autoscaling``, ``checkpoint:PATH``) or an export directory
(``train_control.py --export-dir DIR``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from inferencegym.envs.control_env import ControlEnv
from inferencegym.policies.autoscalers import make_autoscaler
from inferencegym.rl.control import LearnedAutoscaler, load_control_policy
from inferencegym.rl.policy_loader import load_exported


def controller(spec: str):
    """(autoscaler, feature set of its observation) of a policy spec."""
    if Path(spec).is_dir():
        pol = load_exported(spec, "cluster_autoscaling")
        feats = pol.meta["control"]["features"]
        return LearnedAutoscaler(pol, feats), feats
    if ":" in spec:
        ctl = load_control_policy(spec, "cluster_autoscaling")
        return ctl, ctl.features
    return make_autoscaler(spec), "base"


def validation_episodes(ctl, features: str, episodes: int) -> list[dict]:
    """Greedy episodes of autoscaler ``ctl`` on validation seeds 5000.. (one record each)."""
    env = ControlEnv(split="validation", features=features)
    eps = []
    for s in range(5000, 5000 + episodes):
        c0 = time.process_time()
        env.reset(seed=s)
        ctl.reset(env.ctx)
        done = False
        while not done:
            _, _, done, _, info = env.step(ctl.act(env.fleet.observe()))
        eps.append({"day": env.day, "seed": s, "score": info["score"], "gpu_hours": info["summary"]["gpu_hours"],
                    "slo_attainment": info["summary"]["slo_attainment"], "cpu_s": time.process_time() - c0})
    return eps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", required=True)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = {}
    for spec in a.policies.split(","):
        ctl, feats = controller(spec)
        eps = validation_episodes(ctl, feats, a.episodes)
        out[spec] = eps
        print(f"{spec}: score {np.mean([e['score'] for e in eps]):.4f}, GPU-hours "
              f"{np.mean([e['gpu_hours'] for e in eps]):.1f}, SLO {np.mean([e['slo_attainment'] for e in eps]):.4f}",
              flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
