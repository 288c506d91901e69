"""When does dropping the mega-prompt guard (KV budget 0.15) early pay? (issue 21, eighth session)

The shipped ``pretrained:adversarial_multitenant`` gains most of its margin over ``phase_rule`` by
playing KV budget 0.9 in windows where the rule still holds 0.15 after a mega-prompt (``low+mega``;
``benchmarks/issue21_adv_guards.py``). Here, at *every* such window of the module's own episodes, both
KV budgets (the module's other knobs kept) are played on an exact env copy, then the module continues
for ``--horizon`` windows (common random numbers); the advantage of 0.9 over 0.15 is averaged per
observable cell (windows since the last mega-prompt x the fitted sine's sign and slope at the next
window). Per-episode sums ± 1.96 sd / sqrt(episodes). Training seeds only (< 500).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_adv_flips.py --seeds 300 40 \\
        --json-out benchmarks/results/issue21/eighth_adv_flips.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from inferencegym.envs.actions import ServeAction  # noqa: E402
from inferencegym.envs.serve_env import LLMServeEnv  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402
from inferencegym.rl.policy_loader import load_policy  # noqa: E402
from inferencegym.rl.rollout_labels import GRADE_REWARD, rollout_return  # noqa: E402

TASK = "adversarial_multitenant"


def episode(mod, seed: int, horizon: int) -> list[tuple]:
    env = LLMServeEnv(TASK, reward_config=GRADE_REWARD)
    rule = PhaseRulePolicy(TASK)
    mod.reset(seed)
    rule.reset(seed)
    obs, info = env.reset(seed=seed)
    rows, w = [], 0
    while True:
        before = copy.deepcopy(mod)
        a = ServeAction.from_any(mod.act(obs, info))
        rule.act(obs, info)
        name = rule.detector.forecast()
        if name == "low+mega":
            f = rule.detector.features(level=2)
            q = []
            for kv in (0.15, 0.9):
                m = copy.deepcopy(before)
                m.act(obs, info)
                q.append(rollout_return(copy.deepcopy(env), a.model_copy(update={"kv_budget_fraction": kv}), m, horizon))
            rows.append((seed, w, float(f[6]) * 10, float(f[0]), float(f[3]), float(a.kv_budget_fraction > 0.5),
                         q[1] - q[0]))
        obs, _, term, trunc, info = env.step(a)
        w += 1
        if term or trunc:
            return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(300, 40))
    ap.add_argument("--horizon", type=int, default=20)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    if args.seeds[0] + args.seeds[1] > 500:
        sys.exit("flip labels use training seeds (< 500)")
    mod = load_policy("pretrained:adversarial_multitenant", TASK)
    seeds = list(range(args.seeds[0], args.seeds[0] + args.seeds[1]))
    rows = []
    for s in seeds:
        rows += episode(mod, s, args.horizon)
    a = np.asarray(rows)
    n = len(seeds)
    cells = []
    for lo, hi in ((0, 1), (1, 2), (2, 3), (3, 4), (4, 11)):
        for sin_pos in (0.0, 1.0):
            for rising in (0.0, 1.0):
                m = (a[:, 2] >= lo) & (a[:, 2] < hi) & ((a[:, 3] > 0) == sin_pos) & ((a[:, 4] > 0) == rising)
                if m.sum() < 5:
                    continue
                per_ep = np.array([a[m & (a[:, 0] == s), 6].sum() for s in seeds])
                c = {"since_mega": [lo, hi], "sine_next_positive": bool(sin_pos), "rising": bool(rising),
                     "windows": int(m.sum()), "module_plays_0.9": float(a[m, 5].mean()),
                     "mean_adv_0.9": float(a[m, 6].mean()), "per_episode_sum": float(per_ep.mean()),
                     "per_episode_ci95": float(1.96 * per_ep.std(ddof=1) / np.sqrt(n))}
                cells.append(c)
                print(f"since {lo}-{hi} sin>0 {int(sin_pos)} rising {int(rising)}: {c['windows']:4d} windows, module 0.9 "
                      f"in {c['module_plays_0.9']:.2f}; adv(0.9) {c['mean_adv_0.9']:+.4f}, per episode "
                      f"{c['per_episode_sum']:+.4f} ± {c['per_episode_ci95']:.4f}", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "benchmarks/issue21_adv_flips.py " + " ".join(sys.argv[1:]),
                                             "seeds": seeds, "horizon": args.horizon, "cells": cells}, indent=1))


if __name__ == "__main__":
    main()
