"""Is there a one-step improvement of bursty_workload's ``phase_rule`` in what the observation shows?
(issue 21, eighth session)

At *every* window of the rule's episodes (training seeds), both entries of its table (``off``,
``on``) are played for that window on an exact env copy, then the rule for ``--horizon`` windows
(:func:`inferencegym.rl.rollout_labels.collect`, common random numbers). The advantage of *flipping*
the rule's choice (the other entry minus the rule's) is then averaged per observable cell: the
forward filter's P(on), the load (queued + running requests) and the configuration in force (the
burst's INT8 or not). A cell with a positive mean is where a policy reading those signals could
beat the rule (policy improvement); per-episode sums ± 95 % (normal) say whether it is more than
noise.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_bursty_flips.py --seeds 200 30 \\
        --out ray_results/b8_flip --json-out benchmarks/results/issue21/eighth_flip_advantages.json

Collection: ~15-30 s per episode on the busy 2-core machine (compiled core); files already in
``--out`` are reused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from inferencegym.envs.phase_detector import PhaseDetector  # noqa: E402
from inferencegym.envs.serve_env import OBS_FEATURES  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy, shipped_settings  # noqa: E402
from inferencegym.rl.rollout_labels import collect  # noqa: E402

TASK = "bursty_workload"
_I = {n: i for i, n in enumerate(OBS_FEATURES)}
P_BINS = (0.0, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.01)
LOAD_BINS = (0.0, 4.0, 12.0, 24.0, 1e9)


def cells(paths: list[Path]) -> list[dict]:
    rule = PhaseRulePolicy(TASK)
    rows = []
    for ep, path in enumerate(paths):
        d = np.load(path)
        det = PhaseDetector(rule.task, shipped_settings(TASK))
        det.reset()
        for t, o in enumerate(d["obs"]):
            det.update(o)
            q, ri = d["q"][t], int(d["rule"][t])
            if ri < 0 or np.isnan(q).any():
                continue
            load = float(o[_I["queue_depth"]] + o[_I["running"]]) * rule.task.ref_batch
            rows.append((ep, det.p_on, load, float(o[_I["cfg_quantization"]] > 0.25), float(q[1 - ri] - q[ri])))
    a = np.asarray(rows)
    n_ep = len(paths)
    out = []
    for i in range(len(P_BINS) - 1):
        for j in range(len(LOAD_BINS) - 1):
            for cur in (0.0, 1.0):
                m = ((a[:, 1] >= P_BINS[i]) & (a[:, 1] < P_BINS[i + 1]) & (a[:, 2] >= LOAD_BINS[j])
                     & (a[:, 2] < LOAD_BINS[j + 1]) & (a[:, 3] == cur))
                if m.sum() < 5:
                    continue
                per_ep = np.array([a[m & (a[:, 0] == e), 4].sum() for e in range(n_ep)])
                out.append({"p_on": [P_BINS[i], P_BINS[i + 1]], "load_requests": [LOAD_BINS[j], LOAD_BINS[j + 1]],
                            "burst_config_in_force": bool(cur), "windows": int(m.sum()),
                            "mean_flip_advantage": float(a[m, 4].mean()), "share_positive": float((a[m, 4] > 0).mean()),
                            "per_episode_sum": float(per_ep.mean()),
                            "per_episode_sum_ci95": float(1.96 * per_ep.std(ddof=1) / np.sqrt(n_ep))})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(200, 30))
    ap.add_argument("--out", default="ray_results/b8_flip")
    ap.add_argument("--horizon", type=int, default=20)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    if args.seeds[0] + args.seeds[1] > 500:
        sys.exit("flip labels use training seeds (< 500); validation starts at 500, held-out at 1000")
    rule = PhaseRulePolicy(TASK)
    paths = collect(TASK, range(args.seeds[0], args.seeds[0] + args.seeds[1]), args.out, tag="flip",
                    candidates=[rule.by_phase["off"], rule.by_phase["on"]], every=1, horizon=args.horizon)
    table = cells(paths)
    for c in table:
        print(f"P(on) {c['p_on'][0]:.2f}-{c['p_on'][1]:.2f} load {c['load_requests'][0]:>4.0f}-"
              f"{min(c['load_requests'][1], 999):>4.0f} burst cfg {int(c['burst_config_in_force'])}: "
              f"{c['windows']:5d} windows, flip {c['mean_flip_advantage']:+.4f} (positive {c['share_positive']:.2f}), "
              f"per episode {c['per_episode_sum']:+.4f} ± {c['per_episode_sum_ci95']:.4f}")
    pos = [c for c in table if c["per_episode_sum"] - c["per_episode_sum_ci95"] > 0]
    print(f"cells where flipping the rule pays beyond the interval: {len(pos)} of {len(table)}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({
            "command": "OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_bursty_flips.py "
                       + " ".join(sys.argv[1:]), "task": TASK, "episodes": len(paths), "horizon": args.horizon,
            "cells": table, "cells_positive_beyond_ci": len(pos)}, indent=1))


if __name__ == "__main__":
    main()
