"""The privileged ``lookahead`` ceiling on held-out seeds, paired with ``phase_rule`` and PPO (issue 21).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/lookahead_table.py --tasks adversarial_multitenant \\
        --episodes 20 --seed 1000 [--mode ceiling|rule] [--ppo pretrained|checkpoint:PATH|none] [--json-out FILE]

``--mode ceiling`` (default) is :data:`inferencegym.evaluation.lookahead.CEILING`: the clairvoyant
table and ``phase_rule`` as bases, every table configuration tried near the hidden phase changes;
``--mode rule`` the first session's cheaper lookahead over ``phase_rule`` alone. The lookahead costs
one full-episode rollout per distinct alternative per window, so it runs on fewer seeds than the
difficulty table when the machine is busy; ``phase_rule``, ``clairvoyant`` and PPO run on the same
seeds here, for the paired margins. The JSON is rewritten after every seed (a stopped run keeps
what it measured).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.evaluation.cluster import ci95  # noqa: E402
from inferencegym.evaluation.lookahead import CEILING, lookahead_episode  # noqa: E402
from inferencegym.evaluation.single import evaluate_policy  # noqa: E402

MODES = {"ceiling": CEILING, "rule": {}}


def paired(a: list[float], b: list[float]) -> dict:
    """Mean ± 95 % half-width of the per-seed differences a - b, and on how many seeds a > b / a < b."""
    d = (np.asarray(a) - np.asarray(b)).tolist()
    return {"mean": float(np.mean(d)), "ci95": float(ci95(d)) if len(d) > 1 else float("nan"),
            "higher": sum(x > 1e-12 for x in d), "lower": sum(x < -1e-12 for x in d), "n": len(d)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="adversarial_multitenant,bursty_workload")
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--mode", choices=sorted(MODES), default="ceiling")
    ap.add_argument("--ppo", default="pretrained", help="pretrained | checkpoint:PATH | none")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    out: dict = {"mode": args.mode, "config": {k: list(v) if isinstance(v, tuple) else v
                                               for k, v in MODES[args.mode].items()}}
    for task in args.tasks.split(","):
        seeds = [args.seed + i for i in range(args.episodes)]
        refs = {"phase_rule": "phase_rule", "clairvoyant": "clairvoyant"}
        if args.ppo != "none":
            import inferencegym.rl  # noqa: F401  (registers the checkpoint: / pretrained: schemes)
            refs["ppo"] = f"pretrained:{task}" if args.ppo == "pretrained" else args.ppo
        row: dict = {"seeds": seeds, "policies": refs}
        for name, spec in refs.items():
            row[name] = [e.score for e in evaluate_policy(spec, task, episodes=args.episodes, seed=args.seed).episodes]
        row.update(lookahead=[], rollouts=[], deviations=[], wall_s=[])
        out[task] = row
        for s in seeds:
            t0 = time.time()
            e = lookahead_episode(task, s, max_rollouts=10**6, **MODES[args.mode])
            row["lookahead"].append(e.score)
            row["rollouts"].append(e.metrics["lookahead/rollouts"])
            row["deviations"].append(e.metrics["lookahead/deviations"])
            row["wall_s"].append(round(time.time() - t0, 1))
            i = len(row["lookahead"]) - 1
            print(f"{task} seed {s}: lookahead {e.score:.4f} phase_rule {row['phase_rule'][i]:.4f} "
                  + (f"ppo {row['ppo'][i]:.4f} " if "ppo" in row else "")
                  + f"({row['rollouts'][-1]} rollouts, {row['wall_s'][-1]} s)", flush=True)
            n = len(row["lookahead"])
            row["paired"] = {f"lookahead - {b}": paired(row["lookahead"], row[b][:n]) for b in refs}
            if "ppo" in row:
                row["paired"]["ppo - phase_rule"] = paired(row["ppo"][:n], row["phase_rule"][:n])
            row["paired"]["clairvoyant - phase_rule"] = paired(row["clairvoyant"][:n], row["phase_rule"][:n])
            if args.json_out:
                with open(args.json_out + ".tmp", "w") as fh:
                    json.dump(out, fh, indent=1)
                os.replace(args.json_out + ".tmp", args.json_out)
        for name in (*refs, "lookahead"):
            print(f"{task} {name}: {np.mean(row[name]):.4f} ± {ci95(row[name]):.4f}")
        for k, p in row["paired"].items():
            print(f"- {task}: {k} = {p['mean']:+.4f} ± {p['ci95']:.4f} (higher on {p['higher']}/{p['n']}, "
                  f"lower on {p['lower']})")
        print(f"  ({sum(row['wall_s']):.0f} s of lookahead, rollouts per episode {row['rollouts']})", flush=True)


if __name__ == "__main__":
    main()
