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
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from issue21_adv10b_allknob import fit, fit_nb, label_episode, label_neighbours  # noqa: E402
from issue21_adv_actors import make_actor  # noqa: E402
from issue21_adv_spell_policy import add_fit_args  # noqa: E402
from issue21_adv_spells import label_seeds  # noqa: E402


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
    f = add_fit_args(sub.add_parser("fit"))
    f.add_argument("--neighbours", action="store_true", help="fit neighbour labels (label --neighbours)")
    args = ap.parse_args()
    if args.cmd == "fit":
        (fit_nb if args.neighbours else fit)(args)
        return
    if args.seeds[0] + args.seeds[1] > 500:
        sys.exit(f"labels use training seeds (< 500); got seeds up to {args.seeds[0] + args.seeds[1] - 1}")
    def describe(seed: int, d: dict, secs: float) -> str:
        if args.neighbours:
            adv = d["q"][:, 1:] - d["q"][:, :1]
            return (f"seed {seed}: grade {float(d['score']):.4f}, {len(adv)} windows, mean adv per neighbour "
                    f"{np.round(adv.mean(axis=0), 3).tolist()}, {secs:.1f} s")
        adv = d["q"] - d["q"][np.arange(len(d["q"])), d["act"]][:, None]
        return (f"seed {seed}: grade {float(d['score']):.4f}, {len(adv)} windows, a candidate beats the actor in "
                f"{int((adv.max(axis=1) > 1e-9).sum())}, mean best adv {adv.max(axis=1).mean():+.3f}, {secs:.1f} s")

    labeller = label_neighbours if args.neighbours else label_episode
    label_seeds(args.out, args.tag, range(args.seeds[0], args.seeds[0] + args.seeds[1]),
                lambda seed: labeller(make_actor(args.actor), seed, args.horizon, args.every), describe)


if __name__ == "__main__":
    main()
