"""Do the all-knob advantages of ``issue21_adv10b_cli.py label`` depend on the rollout horizon? (issue 21,
tenth session b). Pairs the windows labelled with ``--horizon 20`` (every 2nd window) and ``--horizon 60`` (every
4th) on the same seeds: the correlation of the two advantages per candidate, the share of windows where the best
candidate agrees, and the mean advantage per forecast-independent candidate.

    .venv/bin/python benchmarks/issue21_adv10b_horizon.py ray_results/adv10b_labels ray_results/adv10b_h60 \\
        benchmarks/results/issue21/adv10b_horizon.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

TASK = "adversarial_multitenant"


def adv(d) -> np.ndarray:
    q = d["q"]
    return q - q[np.arange(len(q)), d["act"]][:, None]


def main() -> None:
    h20, h60, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    a20, a60, act = [], [], []
    for p in sorted(h60.glob(f"{TASK}_*.npz")):
        seed = p.stem.split("_")[-1]
        q = list(h20.glob(f"{TASK}_*_{seed}.npz"))
        if not q:
            continue
        d60, d20 = np.load(p), np.load(q[0])
        at = {int(w): i for i, w in enumerate(d20["w"])}
        rows = [(i, at[int(w)]) for i, w in enumerate(d60["w"]) if int(w) in at]
        a60.append(adv(d60)[[r[0] for r in rows]])
        a20.append(adv(d20)[[r[1] for r in rows]])
        act.append(d60["act"][[r[0] for r in rows]])
    a20, a60, act = np.concatenate(a20), np.concatenate(a60), np.concatenate(act)
    off = np.ones_like(a20, bool)
    off[np.arange(len(a20)), act] = False
    best20, best60 = a20.argmax(axis=1), a60.argmax(axis=1)
    rep = {"command": "benchmarks/issue21_adv10b_horizon.py " + " ".join(sys.argv[1:]), "windows": int(len(a20)),
           "corr_h20_h60_other_candidates": float(np.corrcoef(a20[off], a60[off])[0, 1]),
           "corr_clipped_1": float(np.corrcoef(np.clip(a20[off], -1, 1), np.clip(a60[off], -1, 1))[0, 1]),
           "best_candidate_agrees": float((best20 == best60).mean()),
           "some_candidate_beats_actor_h20": float((a20.max(axis=1) > 1e-9).mean()),
           "some_candidate_beats_actor_h60": float((a60.max(axis=1) > 1e-9).mean()),
           "mean_adv_h20": a20.mean(axis=0).tolist(), "mean_adv_h60": a60.mean(axis=0).tolist()}
    print(json.dumps(rep, indent=1))
    out.write_text(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
