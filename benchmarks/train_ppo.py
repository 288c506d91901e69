"""Training benchmark (not CI): PPO per task for a short wall-clock budget, evaluated on held-out
seeds against the baselines; writes run records, a report with learning curves and the pretrained
module export.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_ppo.py --task cluster_routing --minutes 5 \
        --episodes 20 --seed 1000 [--export-pretrained] [--set modules.router_pol.type=mlp_router --tag mlp]

Results: benchmarks/results/training/<task>[_<tag>].json and reports/training/ (report.md/html + PNGs).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", action="append", required=True, help="task id (repeatable)")
    ap.add_argument("--minutes", type=float, default=5.0, help="training wall-clock budget per task")
    ap.add_argument("--steps", type=int, default=None, help="env-step budget (default: the config's)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000, help="first held-out evaluation seed")
    ap.add_argument("--train-seed", type=int, default=0)
    ap.add_argument("--baselines", default=None, help="comma-separated (default per task kind)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override a.b=v")
    ap.add_argument("--tag", default="", help="suffix of the record / experiment name (ablations)")
    ap.add_argument("--val-episodes", type=int, default=None,
                    help="validation episodes per candidate when selecting the returned policy among the "
                         "warm start and the kept checkpoints (default: the config's evaluation.val_episodes; 0: last)")
    ap.add_argument("--export-pretrained", action="store_true", help="export the returned (selected) policy")
    ap.add_argument("--resume", action="store_true",
                    help="continue the interrupted experiment of the same name (Tuner.restore; same options)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars (logs to a file)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "training"))
    ap.add_argument("--report", default=str(REPO / "reports" / "training"))
    args = ap.parse_args()

    from inferencegym.rl.config import load_config
    from inferencegym.rl.pipeline import export_pretrained, log_comparison, selected_export, train_and_compare
    from inferencegym.rl.report import load_records, write_report

    command = "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_ppo.py " + shlex.join(sys.argv[1:])
    for task in args.task:
        path = REPO / "rllib_configs" / f"{task}.yaml"
        sets = list(args.sets) + [f"stop.time_total_s={args.minutes * 60}"]
        cfg = load_config(path).with_overrides(steps=args.steps, seed=args.train_seed, sets=sets)
        suffix = f"_{args.tag}" if args.tag else ""
        if suffix:
            cfg = cfg.with_overrides(sets=[f"name={cfg.name}{suffix}"])
        rec_path = Path(args.out) / f"{task}{suffix}.json"
        record = train_and_compare(cfg, config_path=str(path.relative_to(REPO)), episodes=args.episodes,
                                   seed=args.seed, baselines=args.baselines.split(",") if args.baselines else None,
                                   command=command, record_path=rec_path, progress=not args.no_progress,
                                   resume=args.resume, val_episodes=(cfg.evaluation.val_episodes
                                                                     if args.val_episodes is None else args.val_episodes),
                                   val_seed=cfg.evaluation.val_seed)
        if args.export_pretrained and not suffix:
            module_dir, replace = selected_export(record)
            export_pretrained(module_dir, cfg, REPO / "inferencegym" / "data" / "pretrained" / task, replace=replace,
                              extra={"train": {k: record["train"][k] for k in ("env_steps", "train_time_s", "seed")},
                                     "command": command})
        files = write_report(load_records(args.out), args.report)
        log_comparison(record, files)
        for r in record["rows"]:
            print(f"{task:28s} {r['policy']:34s} grade {r['score_mean']:.3f} ± {r['score_ci95']:.3f} "
                  f"p99 TTFT {r.get('ttft_p99_s')}", flush=True)
        print(f"{task}: train {record['train']}", flush=True)


if __name__ == "__main__":
    main()
