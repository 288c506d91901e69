"""Can a regressor on the observation predict where flipping bursty_workload's ``phase_rule`` pays?
(issue 21, eighth session) The flip labels of ``benchmarks/issue21_bursty_flips.py`` (every window,
the rule's other table entry for one window, then the rule) fitted by the rollout-advantage
regressor (:class:`inferencegym.rl.advantage_fit.AdvantageModel`: the compact current-window features
and the level-2 phase features, advantages clipped to ±1), 3-fold cross-validated by episode: the
summed advantage per held-out-fold episode of flipping where the prediction exceeds a margin.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_bursty_flip_cv.py --labels ray_results/b8_flip \\
        [--json-out benchmarks/results/issue21/eighth_flip_cv.json]
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

from inferencegym.rl.advantage_fit import AdvantageModel, compact_cols, load_labels  # noqa: E402

TASK = "bursty_workload"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", default="ray_results/b8_flip")
    ap.add_argument("--margins", default="0,0.05,0.1,0.2")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    paths = sorted(Path(args.labels).glob(f"{TASK}_*.npz"))
    d = load_labels(paths, TASK)
    x, adv, ep = d["x"], d["adv"], d["ep"]
    ri = np.concatenate([(lambda f: f["rule"][~np.isnan(f["q"]).any(axis=1) & (f["rule"] >= 0)])(np.load(p))
                         for p in paths])
    assert len(ri) == len(x)
    cols = compact_cols(x.shape[1])
    margins = [float(m) for m in args.margins.split(",")]
    per_ep = {m: np.zeros(len(paths)) for m in margins}
    flips = {m: 0 for m in margins}
    for k in range(3):
        te = (ep % 3) == k
        m = AdvantageModel(x.shape[1], adv.shape[1], cols=cols, clip=1.0, hidden=32, seed=0)
        m.fit(x[~te], adv[~te], weight_decay=1e-2)
        pred = m.predict(x[te])
        other = 1 - ri[te]                                      # the flipped entry's column
        idx = np.arange(len(pred))
        for mg in margins:
            act = pred[idx, other] - pred[idx, ri[te]] > mg       # predicted flip advantage above the margin
            real = adv[te][idx, other]
            flips[mg] += int(act.sum())
            for e in np.unique(ep[te]):
                sel = ep[te] == e
                per_ep[mg][e] = float((real * act)[sel].sum())
    rows = []
    for mg in margins:
        s = per_ep[mg]
        rows.append({"margin": mg, "windows_flipped": flips[mg], "windows": int(len(x)),
                     "per_episode_gain": float(s.mean()), "per_episode_gain_ci95": float(1.96 * s.std(ddof=1) / np.sqrt(len(s))),
                     "episodes_better": int((s > 1e-12).sum()), "episodes_worse": int((s < -1e-12).sum())})
        r = rows[-1]
        print(f"margin {mg:.2f}: flips {r['windows_flipped']} of {r['windows']} windows, summed flip advantage per episode "
              f"{r['per_episode_gain']:+.4f} ± {r['per_episode_gain_ci95']:.4f} (better {r['episodes_better']} / worse {r['episodes_worse']})")
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python "
                                             "benchmarks/issue21_bursty_flip_cv.py " + " ".join(sys.argv[1:]),
                                             "episodes": len(paths), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
