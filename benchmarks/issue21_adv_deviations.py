"""Where does the shipped ``pretrained:adversarial_multitenant`` leave ``phase_rule``, and what does it cost?
(issue 21, eighth session, adversarial)

Plays the module and the rule on the same seeds; beside the module's episode a copy of the rule reads
the same observations, so each window's deviation (the module's action vs the rule's) is known with
the rule's phase name. Per seed: grade difference, deviations by kind (rule phase -> module's split /
KV budget). Training / validation seeds only (< 1000).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_adv_deviations.py --seeds 100 200 \\
        --json-out benchmarks/results/issue21/eighth_adv_deviations.json
"""

from __future__ import annotations

import argparse
import collections
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

TASK = "adversarial_multitenant"


def _kind(a: ServeAction) -> str:
    return f"split={int(a.prefill_decode_split)},kv={a.kv_budget_fraction:g}"


def play(policy, seed: int, shadow: PhaseRulePolicy | None) -> tuple[float, list[tuple[int, str, str, str]]]:
    env = LLMServeEnv(TASK)
    policy.reset(seed)
    obs, info = env.reset(seed=seed)
    if shadow is not None:
        shadow.reset(seed)
    devs, w = [], 0
    while True:
        a = ServeAction.from_any(policy.act(obs, info))
        if shadow is not None:
            ra = shadow.act(obs, info)
            name = shadow.detector.forecast()
            if a != ra:
                devs.append((w, name, _kind(ra), _kind(a)))
        obs, _, term, trunc, info = env.step(a)
        w += 1
        if term or trunc:
            return float(env.grade().score), devs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(100, 200))
    ap.add_argument("--policy", default="pretrained:adversarial_multitenant")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    if args.seeds[0] + args.seeds[1] > 1000:
        sys.exit("diagnostics use training / validation seeds (< 1000)")
    mod = load_policy(args.policy, TASK)
    rule = PhaseRulePolicy(TASK)
    rows = []
    kinds = collections.Counter()
    for s in range(args.seeds[0], args.seeds[0] + args.seeds[1]):
        g_rule, _ = play(rule, s, None)
        g_mod, devs = play(mod, s, PhaseRulePolicy(TASK))
        for _, name, ra, ma in devs:
            kinds[(name, ra, ma)] += 1
        rows.append({"seed": s, "rule": g_rule, "module": g_mod, "diff": g_mod - g_rule, "deviations": devs})
    d = np.array([r["diff"] for r in rows])
    print(f"module - rule: {d.mean():+.4f} (median {np.median(d):+.4f}), better {int((d > 0).sum())} / worse "
          f"{int((d < 0).sum())}; below -0.03: {int((d < -0.03).sum())}")
    for r in sorted(rows, key=lambda r: r["diff"])[:8]:
        print(r["seed"], f"{r['diff']:+.4f}", collections.Counter((n, ra, ma) for _, n, ra, ma in r["deviations"]).most_common(4))
    for k, v in kinds.most_common():
        print(v, k)
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "benchmarks/issue21_adv_deviations.py " + " ".join(sys.argv[1:]),
                                             "rows": rows}, indent=0))


if __name__ == "__main__":
    main()
