"""Issue 21 ablation table: learned policies paired with ``phase_rule`` on held-out seeds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_ablation.py --task adversarial_multitenant \\
        --episodes 20 --seed 1000 --policy "BC of phase_rule=ray_results/warm/adversarial_multitenant/bc_phase_rule/default_policy" \\
        [--policy NAME=SPEC ...] [--json-out FILE]

SPEC: a registry name, ``pretrained:TASK``, ``checkpoint:DIR``, a directory (a saved RLModule or a
Tune checkpoint) or ``advantage:MODEL.pt@MARGIN`` (the rollout-advantage policy of
``inferencegym.rl.advantage_fit``). Each row: mean grade ± 95 % CI, and the paired difference to ``phase_rule`` (mean of
per-seed differences ± the project's ``ci95``, seeds better / worse). Training records of
``benchmarks/train_ppo.py`` already hold their rows' per-seed scores: ``--record FILE`` adds them
without re-running (same seeds required).
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

from inferencegym.evaluation.cluster import ci95  # noqa: E402
from inferencegym.rl.compare import evaluate_one  # noqa: E402
from inferencegym.rl.policy_loader import load_checkpoint, load_policy  # noqa: E402


def _policy(spec: str, task: str):
    if spec.startswith("advantage:"):  # advantage:MODEL.pt@MARGIN (inferencegym.rl.advantage_fit)
        from inferencegym.rl.advantage_fit import AdvantageModel, AdvantagePolicy

        path, _, margin = spec.removeprefix("advantage:").partition("@")
        return AdvantagePolicy(task, AdvantageModel.load(path), margin=float(margin or 0.2))
    if spec.startswith(("pretrained:", "checkpoint:")):
        return load_policy(spec, task)
    if Path(spec).is_dir():
        return load_checkpoint(str(Path(spec).resolve()), task)
    return spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--policy", action="append", default=[], help="NAME=SPEC")
    ap.add_argument("--record", action="append", default=[], help="NAME=FILE:ROW_PREFIX (a train_ppo record's row)")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    rule = evaluate_one("phase_rule", args.task, episodes=args.episodes, seed=args.seed, name="phase_rule")
    rows = [{"policy": "phase_rule", "scores": rule["scores"]}]
    for item in args.policy:
        name, _, spec = item.partition("=")
        r = evaluate_one(_policy(spec, args.task), args.task, episodes=args.episodes, seed=args.seed, name=name)
        rows.append({"policy": name, "spec": spec, "scores": r["scores"]})
        print(name, round(r["score_mean"], 4), flush=True)
    for item in args.record:
        name, _, rest = item.partition("=")
        path, _, prefix = rest.rpartition(":")
        rec = json.loads(Path(path).read_text())
        row = next(x for x in rec["rows"] if str(x["policy"]).startswith(prefix))
        if list(row["seeds"]) != list(rule["seeds"]):
            raise SystemExit(f"{path}: row {row['policy']!r} was run on other seeds")
        rows.append({"policy": name, "spec": f"{path}:{row['policy']}", "scores": row["scores"]})
    base = np.asarray(rule["scores"])
    print(f"| {args.task} | grade | minus phase_rule (paired) | seeds better / worse |\n|---|---|---|---|")
    for r in rows:
        s = np.asarray(r["scores"])
        d = s - base
        r.update(score_mean=float(s.mean()), score_ci95=float(ci95(list(s))), minus_phase_rule=float(d.mean()),
                 minus_phase_rule_ci95=float(ci95(list(d))), better=int((d > 0).sum()), worse=int((d < 0).sum()))
        print(f"| {r['policy']} | {r['score_mean']:.4f} ± {r['score_ci95']:.4f} | {r['minus_phase_rule']:+.4f} ± "
              f"{r['minus_phase_rule_ci95']:.4f} | {r['better']} / {r['worse']} |")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_ablation.py "
                                             + " ".join(sys.argv[1:]), "task": args.task, "seeds": rule["seeds"],
                                             "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
