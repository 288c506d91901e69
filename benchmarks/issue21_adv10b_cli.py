"""The command line of the tenth session (b)'s all-knob advantage labels (issue 21): ``label`` and ``fit`` of
``issue21_adv10b_allknob.py`` (where the labelling, fitting and policies live; this file only parses and
dispatches, so that module imports nothing from the actor specs that name its policies).

    python benchmarks/issue21_adv10b_cli.py label --seeds 100 80 --out ray_results/adv10b_labels
    python benchmarks/issue21_adv10b_cli.py fit --labels ray_results/adv10b_labels --model M.pt
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from issue21_adv10b_allknob import TASK, fit, fit_nb, label_episode, label_neighbours  # noqa: E402
from issue21_adv_actors import make_actor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lab = sub.add_parser("label")
    lab.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(100, 80))
    lab.add_argument("--horizon", type=int, default=20)
    lab.add_argument("--every", type=int, default=2)
    lab.add_argument("--actor", default="pretrained:adversarial_multitenant")
    lab.add_argument("--tag", default="module")
    lab.add_argument("--neighbours", action="store_true", help="screen one-knob changes (NEIGHBOURS) instead")
    lab.add_argument("--out", type=Path, default=Path("ray_results/adv10b_labels"))
    f = sub.add_parser("fit")
    f.add_argument("--labels", type=Path, nargs="+", required=True)
    f.add_argument("--model", type=Path, required=True)
    f.add_argument("--clips", type=float, nargs="+", default=[1.0])
    f.add_argument("--hidden", type=int, default=32)
    f.add_argument("--epochs", type=int, default=60)
    f.add_argument("--json-out", type=Path, default=None)
    f.add_argument("--neighbours", action="store_true", help="fit neighbour labels (label --neighbours)")
    args = ap.parse_args()
    if args.cmd == "fit":
        (fit_nb if args.neighbours else fit)(args)
        return
    if args.seeds[0] + args.seeds[1] > 500:
        sys.exit(f"labels use training seeds (< 500); got seeds up to {args.seeds[0] + args.seeds[1] - 1}")
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in range(args.seeds[0], args.seeds[0] + args.seeds[1]):
        path = args.out / f"{TASK}_{args.tag}_{seed}.npz"
        if path.is_file():
            continue
        t0 = time.perf_counter()
        if args.neighbours:
            d = label_neighbours(make_actor(args.actor), seed, args.horizon, args.every)
            adv = d["q"][:, 1:] - d["q"][:, :1]
            print(f"seed {seed}: grade {float(d['score']):.4f}, {len(adv)} windows, mean adv per neighbour "
                  f"{np.round(adv.mean(axis=0), 3).tolist()}, {time.perf_counter() - t0:.1f} s", flush=True)
        else:
            d = label_episode(make_actor(args.actor), seed, args.horizon, args.every)
        tmp = path.with_name(path.stem + ".partial.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, **d)
        tmp.replace(path)
        if args.neighbours:
            continue
        adv = d["q"] - d["q"][np.arange(len(d["q"])), d["act"]][:, None]
        print(f"seed {seed}: grade {float(d['score']):.4f}, {len(adv)} windows, a candidate beats the actor in "
              f"{int((adv.max(axis=1) > 1e-9).sum())}, mean best adv {adv.max(axis=1).mean():+.3f}, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
