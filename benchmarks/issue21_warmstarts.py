"""Issue 21 ablation, warm-start half: clone ``phase_rule`` vs distil the privileged ``lookahead``
onto the history-aware student (4 windows + the observable phase features), each evaluated
greedily on validation seeds, paired with ``phase_rule`` on the same seeds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_warmstarts.py --task adversarial_multitenant \\
        --demos ray_results/distill --episodes 10 --seed 500 [--keep DIR] [--json-out FILE]

The teacher's episodes come from ``python -m inferencegym.rl.distill --task T --seeds 0 16 --out
ray_results/distill`` (training seeds). ``--keep DIR`` keeps each warm start (DIR/<variant>/) for
PPO fine-tuning (``--set bc.enabled=false`` is not how: pass the kept module as the warm start with
``benchmarks/train_ppo.py --set bc.demonstrations=...``, which re-runs the same cloning).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from inferencegym.evaluation.cluster import ci95  # noqa: E402
from inferencegym.rl.bc import warm_start  # noqa: E402
from inferencegym.rl.compare import evaluate_one  # noqa: E402
from inferencegym.rl.config import load_config  # noqa: E402
from inferencegym.rl.policy_loader import load_checkpoint  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STUDENT = "{hidden: [64, 64], history_windows: 4, phase_features: true}"


def variants(demos: str, privileged: bool) -> dict[str, list[str]]:
    mc = STUDENT if not privileged else STUDENT[:-1] + ", critic_privileged_dims: 5}"
    common = ["curriculum.enabled=false", f"modules.default_policy.model_config={mc}"]
    return {"bc_phase_rule": common + ["bc.baseline=phase_rule"],
            "distill_lookahead": common + ["bc.baseline=phase_rule", f"bc.demonstrations={demos}"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="adversarial_multitenant")
    ap.add_argument("--demos", default="ray_results/distill")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=500, help="first validation seed (never >= 1000 here)")
    ap.add_argument("--epochs", type=int, default=None, help="override bc.epochs")
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = load_config(REPO / "rllib_configs" / f"{args.task}.yaml")
    rule = evaluate_one("phase_rule", args.task, episodes=args.episodes, seed=args.seed, name="phase_rule")
    rows = [{"policy": "phase_rule", "score_mean": rule["score_mean"], "score_ci95": rule["score_ci95"]}]
    print(rows[-1], flush=True)
    chosen = variants(str(Path(args.demos).resolve()), privileged=False)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    for name, sets in chosen.items():
        if args.epochs:
            sets = sets + [f"bc.epochs={args.epochs}"]
        cfg = base.with_overrides(sets=sets)
        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            paths = warm_start(cfg, out_dir=tmp)
            pol = load_checkpoint(paths["default_policy"], args.task)
            r = evaluate_one(pol, args.task, episodes=args.episodes, seed=args.seed, name=name)
            info = json.loads((Path(tmp) / "distill.json").read_text()) if (Path(tmp) / "distill.json").is_file() else {}
            if args.keep:
                dst = args.keep / name
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(tmp, dst)
        d = np.asarray(r["scores"]) - np.asarray(rule["scores"])
        rows.append({"policy": name, "score_mean": r["score_mean"], "score_ci95": r["score_ci95"],
                     "minus_phase_rule": float(d.mean()), "minus_phase_rule_ci95": float(ci95(d)),
                     "better_seeds": int((d > 0).sum()), "worse_seeds": int((d < 0).sum()),
                     "distill": info, "seconds": round(time.perf_counter() - t, 1)})
        print(rows[-1], flush=True)
    rec = {"command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_warmstarts.py " + " ".join(sys.argv[1:]),
           "task": args.task, "val_seed": args.seed, "episodes": args.episodes, "loadavg": os.getloadavg(), "rows": rows}
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(rec, indent=2))


if __name__ == "__main__":
    main()
