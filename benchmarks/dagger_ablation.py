"""Does DAgger improve the warm start? The config's BC clone (adversarial_multitenant: the privileged
clairvoyant teacher, K=4 windows of history) against the same clone followed by 1..N DAgger rounds
(``bc.dagger_rounds``, rl/dagger.py), each evaluated greedily on validation seeds, with the teacher
and ``best_static`` on the same seeds; paired differences per seed (Student-t 95 % intervals).

    OMP_NUM_THREADS=1 python benchmarks/dagger_ablation.py --task adversarial_multitenant \\
        --rounds 0 1 2 3 --students greedy sample --episodes 20 --head 5 \\
        --out benchmarks/results/dagger_ablation.json

``--students greedy sample``, ``--betas 0 0.5`` and ``--retrains continue scratch`` add variants (each
with every round count > 0).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402

from inferencegym.rl.bc import warm_start  # noqa: E402
from inferencegym.rl.compare import evaluate_one  # noqa: E402
from inferencegym.rl.config import load_config  # noqa: E402
from inferencegym.rl.policy_loader import load_checkpoint  # noqa: E402
from inferencegym.rl.selection import VALIDATION_SEED  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean of a - b over the same seeds, its 95 % t half-width, and how many seeds a wins."""
    d = np.asarray(a, float) - np.asarray(b, float)
    half = float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
    return {"mean": float(d.mean()), "ci95": half, "wins": int((d > 0).sum()), "n": len(d)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="adversarial_multitenant")
    ap.add_argument("--rounds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--students", nargs="+", default=["greedy"], choices=["greedy", "sample"])
    ap.add_argument("--betas", type=float, nargs="+", default=[0.0])
    ap.add_argument("--retrains", nargs="+", default=["continue"], choices=["continue", "scratch"])
    ap.add_argument("--episodes", type=int, default=5, help="validation episodes per policy")
    ap.add_argument("--seed", type=int, default=VALIDATION_SEED)
    ap.add_argument("--head", type=int, default=0, help="also summarise the first HEAD seeds alone "
                    "(e.g. --episodes 20 --head 5: seeds 500..519 and 500..504 from one run)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override a.b=v")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = load_config(REPO / "rllib_configs" / f"{args.task}.yaml").with_overrides(sets=args.sets)
    load_before = os.getloadavg()
    refs = {}
    rows = []
    for ref in (base.bc.baseline, "best_static"):
        t = time.perf_counter()
        r = evaluate_one(ref, args.task, episodes=args.episodes, seed=args.seed, name=ref)
        refs[ref] = r["scores"]
        rows.append({"policy": ref, "score_mean": r["score_mean"], "score_ci95": r["score_ci95"],
                     "scores": r["scores"], "eval_s": round(time.perf_counter() - t, 1)})
        print(json.dumps(rows[-1]), flush=True)
    variants = [(0, "greedy", 0.0, "continue")] if 0 in args.rounds else []
    variants += [(n, s, b, rt) for rt in args.retrains for s in args.students for b in args.betas
                 for n in args.rounds if n > 0]
    bc_scores = None
    for n, student, beta, retrain in variants:
        cfg = base.with_overrides(sets=[f"bc.dagger_rounds={n}", f"bc.dagger_student={student}",
                                        f"bc.dagger_beta={beta}", f"bc.dagger_retrain={retrain}"])
        name = "bc" if n == 0 else f"bc + dagger {n} ({student}, beta {beta:g}, {retrain})"
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            paths = warm_start(cfg, out_dir=tmp)
            train_s = time.perf_counter() - t
            dag = Path(tmp) / "dagger.json"
            per_round = json.loads(dag.read_text())["rounds"] if dag.exists() else []
            pol = load_checkpoint(paths["default_policy"], args.task)
            t = time.perf_counter()
            r = evaluate_one(pol, args.task, episodes=args.episodes, seed=args.seed, name=name)
            eval_s = time.perf_counter() - t
        row = {"policy": name, "dagger_rounds": n, "student": student, "beta": beta, "retrain": retrain,
               "score_mean": r["score_mean"], "score_ci95": r["score_ci95"], "scores": r["scores"],
               "warm_start_s": round(train_s, 1), "eval_s": round(eval_s, 1), "rounds": per_round,
               "vs_best_static": paired(r["scores"], refs["best_static"]),
               "vs_teacher": paired(r["scores"], refs[base.bc.baseline])}
        if n == 0:
            bc_scores = r["scores"]
        elif bc_scores is not None:
            row["vs_bc"] = paired(r["scores"], bc_scores)
        if 1 < args.head < len(r["scores"]):
            h = args.head
            row[f"first_{h}"] = {"score_mean": float(np.mean(r["scores"][:h])),
                                 "vs_best_static": paired(r["scores"][:h], refs["best_static"][:h]),
                                 "vs_teacher": paired(r["scores"][:h], refs[base.bc.baseline][:h])}
            if n > 0 and bc_scores is not None:
                row[f"first_{h}"]["vs_bc"] = paired(r["scores"][:h], bc_scores[:h])
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
    record = {"command": " ".join(sys.argv), "task": args.task, "val_seed": args.seed, "episodes": args.episodes,
              "bc": base.bc.model_dump(), "history_windows":
              base.modules["default_policy"].model_config_.get("history_windows", 0),
              "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
