"""Does the policy need history? Behaviour cloning of the task's teacher with K = 0, 2, 4, ... windows
of observation history (envs/history.py), each clone evaluated greedily on validation seeds.

PPO runs are too noisy to compare in minutes on a shared 2-core machine; the warm start is not:
it is cheap, deterministic, and says directly whether the observation (with or without history)
carries what the privileged teacher acts on (``adversarial_multitenant``: the hidden tenant phase).
Reference rows: the teacher itself and ``best_static`` on the same seeds.

    OMP_NUM_THREADS=1 python benchmarks/history_ablation.py --task adversarial_multitenant \\
        --windows 0 2 4 8 --episodes 5 --out benchmarks/results/history_ablation.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from inferencegym.rl.bc import warm_start  # noqa: E402
from inferencegym.rl.compare import evaluate_one  # noqa: E402
from inferencegym.rl.config import load_config  # noqa: E402
from inferencegym.rl.policy_loader import load_checkpoint  # noqa: E402
from inferencegym.rl.selection import VALIDATION_SEED  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="adversarial_multitenant")
    ap.add_argument("--windows", type=int, nargs="+", default=[0, 2, 4, 8])
    ap.add_argument("--episodes", type=int, default=5, help="validation episodes per policy")
    ap.add_argument("--seed", type=int, default=VALIDATION_SEED)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override a.b=v")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--phase-features", action="store_true",
                    help="append the observable phase forecast's features (envs/phase_detector.py)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = load_config(REPO / "rllib_configs" / f"{args.task}.yaml").with_overrides(sets=args.sets)
    hidden = base.modules["default_policy"].model_config_.get("hidden", [64, 64])
    rows = []
    for ref in (base.bc.baseline, "best_static"):
        t = time.perf_counter()
        r = evaluate_one(ref, args.task, episodes=args.episodes, seed=args.seed, name=ref)
        rows.append({"policy": ref, "windows": None, "score_mean": r["score_mean"], "score_ci95": r["score_ci95"],
                     "seconds": round(time.perf_counter() - t, 1)})
        print(rows[-1], flush=True)
    for k in args.windows:
        cfg = base.with_overrides(sets=[f"modules.default_policy.model_config={{hidden: {list(hidden)}, "
                                        f"history_windows: {k}"
                                        + (", phase_features: true" if args.phase_features else "") + "}"])
        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            paths = warm_start(cfg, out_dir=tmp)
            losses = [float(x) for x in (Path(tmp) / "bc_losses.txt").read_text().split()]
            pol = load_checkpoint(paths["default_policy"], args.task)
            r = evaluate_one(pol, args.task, episodes=args.episodes, seed=args.seed, name=f"bc K={k}")
        tag = " +phase" if args.phase_features else ""
        rows.append({"policy": f"bc ({base.bc.baseline}) K={k}{tag}", "windows": k, "score_mean": r["score_mean"],
                     "score_ci95": r["score_ci95"], "bc_final_loss": round(losses[-1], 4),
                     "seconds": round(time.perf_counter() - t, 1)})
        print(rows[-1], flush=True)
    record = {"command": " ".join(sys.argv), "task": args.task, "val_seed": args.seed, "episodes": args.episodes,
              "loadavg": os.getloadavg(), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
