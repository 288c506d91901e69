"""Checkpoint selection on validation seeds, then the held-out evaluation (training benchmark, not CI).

PPO's last checkpoint is not always its best: on the single-agent tasks the greedy policy can drift
below its behaviour-cloning start while the (stochastic) training return stays flat. This script
evaluates every kept checkpoint of a ``benchmarks/train_ppo.py`` run greedily on *validation* seeds
(``--val-seed``, default 500..: disjoint from the held-out seeds 1000.. and from the BC seeds
10,000..), keeps the best by mean grade (ties: the later checkpoint), evaluates it on the held-out
seeds, and adds it to the run's record as the row ``ppo (selected ...)`` next to the last checkpoint's
row and the baselines (which the training run evaluated on the same held-out seeds).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/select_checkpoint.py --task adversarial_multitenant \
        --val-episodes 5 --val-seed 500 [--export-pretrained]

The validation table (grade per checkpoint, with the iteration it was taken at) goes into the record
as ``selection``.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def checkpoints(trial_dir: Path) -> list[Path]:
    """``checkpoint_NNNNNN`` dirs of a Tune trial, in the order they were written."""
    cks = [p for p in trial_dir.iterdir() if p.is_dir() and re.fullmatch(r"checkpoint_\d+", p.name)]
    return sorted(cks, key=lambda p: int(p.name.split("_")[1]))


def checkpoint_iteration(index: int, n: int, frequency: int, iterations: int) -> int:
    """The training iteration checkpoint ``index`` of ``n`` was taken at: every ``frequency``
    iterations, and the last one at the end of training (Tune's ``checkpoint_at_end``)."""
    return iterations if index == n - 1 else min((index + 1) * frequency, iterations)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--record", default=None, help="run record (default benchmarks/results/training/<task>.json)")
    ap.add_argument("--val-episodes", type=int, default=5)
    ap.add_argument("--val-seed", type=int, default=500)
    ap.add_argument("--export-pretrained", action="store_true")
    args = ap.parse_args()

    from inferencegym.rl.compare import evaluate_one
    from inferencegym.rl.config import load_config
    from inferencegym.rl.pipeline import export_pretrained
    from inferencegym.rl.policy_loader import load_checkpoint

    rec_path = Path(args.record or REPO / "benchmarks" / "results" / "training" / f"{args.task}.json")
    if not rec_path.is_file():
        sys.exit(f"no run record {rec_path}; run benchmarks/train_ppo.py --task {args.task} first")
    record = json.loads(rec_path.read_text())
    last = Path(record["train"]["checkpoint"])
    cks = checkpoints(last.parent)
    if not cks:
        sys.exit(f"no checkpoints in {last.parent}")
    held = record["rows"][0]
    episodes, seed = int(held["episodes"]), int(held["seeds"][0])
    freq = int(load_config(REPO / record["config"]).checkpoint.frequency) or 1
    for o in (record.get("command") or "").split("--set"):
        if "checkpoint.frequency=" in o:
            freq = int(o.split("checkpoint.frequency=")[1].split()[0])
    iterations = int(record["train"]["iterations"])
    table = []
    for k, ck in enumerate(cks):
        pol = load_checkpoint(ck, args.task)
        row = evaluate_one(pol, args.task, episodes=args.val_episodes, seed=args.val_seed, name=ck.name)
        entry = {"checkpoint": ck.name, "iteration": checkpoint_iteration(k, len(cks), freq, iterations),
                 "val_score_mean": row["score_mean"], "val_ttft_p99_s": row.get("ttft_p99_s")}
        table.append(entry)
        print(json.dumps(entry), flush=True)
    best_i = max(range(len(table)), key=lambda i: (table[i]["val_score_mean"], i))
    best = cks[best_i]
    pol = load_checkpoint(best, args.task)
    module_type = record["rows"][0]["policy"].split("(")[-1].rstrip(")")
    name = f"ppo ({module_type}, selected {best.name})"
    row = evaluate_one(pol, args.task, episodes=episodes, seed=seed, name=name)
    record["rows"] = [r for r in record["rows"] if "selected" not in r["policy"]]
    record["rows"].insert(1, row)
    record["selection"] = {"val_seed": args.val_seed, "val_episodes": args.val_episodes,
                           "table": table, "selected": best.name,
                           "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/select_checkpoint.py "
                                      + shlex.join(sys.argv[1:])}
    rec_path.write_text(json.dumps(record, indent=2, default=str))
    if args.export_pretrained:
        cfg = load_config(REPO / record["config"])
        export_pretrained(best / "learner_group" / "learner" / "rl_module", cfg,
                          REPO / "inferencegym" / "data" / "pretrained" / args.task,
                          extra={"train": {"env_steps": record["train"]["env_steps"],
                                           "train_time_s": record["train"]["train_time_s"],
                                           "seed": record["train"]["seed"], "checkpoint": best.name,
                                           "selected_on_val_seeds_from": args.val_seed},
                                 "command": record.get("command")})
    for r in record["rows"]:
        print(f"{args.task:26s} {r['policy']:44s} grade {r['score_mean']:.3f} ± {r['score_ci95']:.3f} "
              f"p99 TTFT {r.get('ttft_p99_s')}", flush=True)


if __name__ == "__main__":
    main()
