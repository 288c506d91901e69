"""The privileged ``lookahead`` ceiling on held-out seeds, paired with ``phase_rule`` (issue 21).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lookahead_table.py --tasks adversarial_multitenant,bursty_workload \\
        --episodes 5 --seed 1000 [--json-out FILE]

The lookahead (``inferencegym/evaluation/lookahead.py``) costs one full-episode rollout per distinct
alternative action per window, so it runs on fewer seeds than the difficulty table when the machine is
busy; ``phase_rule`` and ``clairvoyant`` run on the same seeds here, for the paired margins.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.evaluation.cluster import ci95  # noqa: E402
from inferencegym.evaluation.lookahead import lookahead_episode  # noqa: E402
from inferencegym.evaluation.single import evaluate_policy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="adversarial_multitenant,bursty_workload")
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    out = {}
    for task in args.tasks.split(","):
        seeds = [args.seed + i for i in range(args.episodes)]
        rule = [e.score for e in evaluate_policy("phase_rule", task, episodes=args.episodes, seed=args.seed).episodes]
        clair = [e.score for e in evaluate_policy("clairvoyant", task, episodes=args.episodes, seed=args.seed).episodes]
        t0 = time.time()
        eps = [lookahead_episode(task, s) for s in seeds]
        look = [e.score for e in eps]
        row = {"seeds": seeds, "phase_rule": rule, "clairvoyant": clair, "lookahead": look,
               "rollouts": [e.metrics["lookahead/rollouts"] for e in eps], "wall_s": round(time.time() - t0, 1)}
        out[task] = row
        for name in ("phase_rule", "clairvoyant", "lookahead"):
            print(f"{task} {name}: {np.mean(row[name]):.4f} ± {ci95(row[name]):.4f}")
        for a, b in (("lookahead", "phase_rule"), ("lookahead", "clairvoyant"), ("phase_rule", "clairvoyant")):
            d = (np.asarray(row[a]) - np.asarray(row[b])).tolist()
            print(f"- {task}: {a} - {b} = {np.mean(d):+.4f} ± {ci95(d):.4f} "
                  f"({a} higher on {sum(x > 1e-12 for x in d)}/{len(d)} seeds)")
        print(f"  ({row['wall_s']} s, rollouts per episode {row['rollouts']})", flush=True)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
