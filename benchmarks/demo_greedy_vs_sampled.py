"""A demo checkpoint's replica agents on validation seeds 500-509, greedy (the module's deterministic
readout, how the demo evaluates them) or sampled (torch seed 0): the tenth session's probe of a demo run
that said "no" (BENCHMARKS.md, "Lead, tenth session": that run's stochastic policy had learned, the argmax of
one window's logits had not left the warm start's knobs; ``replica_sticky``'s readout is now the residual's
argmax, ``inferencegym/rl/replica_modules.py``).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python benchmarks/demo_greedy_vs_sampled.py --mode sampled ray_results/demo_cluster_prefix_sharing/PPO_.../checkpoint_000012
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from inferencegym.rl import policy_loader
from inferencegym.rl.compare import evaluate_one


def _sampled_action(self, module, obs) -> np.ndarray:
    """``ModulePolicy._greedy`` with a sample of the action distribution in place of its argmax."""
    from ray.rllib.core.columns import Columns

    with torch.no_grad():
        logits = module.forward_inference({Columns.OBS: policy_loader._to_batch(obs)})[Columns.ACTION_DIST_INPUTS]
        return np.asarray(module.get_inference_action_dist_cls().from_logits(logits).sample()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path, help="a demo PPO checkpoint directory")
    ap.add_argument("--mode", choices=("greedy", "sampled"), default="greedy")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=500)
    args = ap.parse_args()
    if not args.checkpoint.is_dir():
        ap.error(f"expected a checkpoint directory; got {str(args.checkpoint)!r} (see ray_results/demo_*/PPO_*/)")
    if args.mode == "sampled":
        torch.manual_seed(0)
        policy_loader.ModulePolicy._greedy = _sampled_action
    row = evaluate_one(f"checkpoint:{args.checkpoint}", "cluster_prefix_sharing", episodes=args.episodes, seed=args.seed)
    print(f"{args.mode}: grade {row['score_mean']:.4f} ± {row['score_ci95']:.4f}, p90 TTFT {row['ttft_p90_s']:.3f} s "
          f"({args.episodes} seeds from {args.seed})")


if __name__ == "__main__":
    main()
