"""Distil a spell-guard teacher into the shipped adversarial module's own weights (issue 21, ninth session).

The teacher (``issue21_adv_spell_policy.SpellPolicy``: the shipped module with the fitted spell-level guard
decision) labels every window; the student is ``pretrained:adversarial_multitenant``'s MLP, fine-tuned by
supervised NLL (``inferencegym.rl.bc.bc_train``) from its shipped weights on the aggregate of: round 0, the
teacher's own episodes; round k >= 1, the round-(k-1) student's episodes with the teacher shadowing them
(DAgger: the teacher reads the same observations and answers for each visited state). Windows where the
teacher's action differs from the shipped module's are repeated ``--upweight`` times (they are ~5 % of
the data and carry the whole change). Each round's student is written in the shipped format
(``export_module``: ``module.json`` + ``weights.pt``) under ``--out/rK``. Training seeds only (< 500).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_adv_spell_distill.py \\
        --teacher spell:ray_results/spell_r0.pt@0.1 --seeds 300 40 --rounds 3 --out ray_results/adv_spell_student
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from inferencegym.envs.actions import ServeAction, action_to_flat, flat_to_action  # noqa: E402
from inferencegym.envs.serve_env import LLMServeEnv  # noqa: E402
from inferencegym.rl.bc import bc_train  # noqa: E402
from inferencegym.rl.policy_loader import PRETRAINED_DIR, export_module, load_exported  # noqa: E402

from issue21_adv_actors import TASK, make_actor  # noqa: E402


def episode(student, teacher, shipped, seed: int, teacher_plays: bool):
    """(student inputs, teacher flat actions, shipped module's flat actions, grade) of one episode."""
    env = LLMServeEnv(TASK)
    for p in (student, teacher, shipped):
        p.reset(seed)
    obs, info = env.reset(seed=seed)
    xs, ys, base = [], [], []
    while True:
        x = student._input(obs)
        ta = ServeAction.from_any(teacher.act(obs, info))
        ba = ServeAction.from_any(shipped.act(obs, info))
        sa = ta if teacher_plays else ServeAction.from_any(flat_to_action(student._greedy(student.module, x)))
        xs.append(np.asarray(x, np.float32))
        ys.append(action_to_flat(ta))
        base.append(action_to_flat(ba))
        obs, _, term, trunc, info = env.step(sa)
        if term or trunc:
            return xs, ys, base, float(env.grade().score)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default=None)
    ap.add_argument("--ship", type=Path, default=None, help="a round's export dir (with log.json beside it): "
                    "re-export it as pretrained:adversarial_multitenant (the shipped format)")
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(300, 40))
    ap.add_argument("--record", default="benchmarks/results/issue21/ninth_spell_distill_log.json",
                    help="with --ship: the committed copy of the run's log.json, named in module.json")
    ap.add_argument("--selected", default="validation seeds 500-539",
                    help="with --ship: the seeds the round was selected on, named in module.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--upweight", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("ray_results/adv_spell_student"))
    args = ap.parse_args()
    if args.ship is not None:
        ship(args.ship, args.record, args.selected)
        return
    if args.teacher is None:
        ap.error("give --teacher SPEC (or --ship DIR)")
    first, n = args.seeds
    if first + n * args.rounds > 500:
        sys.exit(f"distillation uses training seeds (< 500): rounds x N from FIRST reach {first + n * args.rounds - 1}")
    import torch

    torch.set_num_threads(1)
    mc = json.loads((PRETRAINED_DIR / TASK / "default_policy" / "module.json").read_text())
    X, Y, B = [], [], []
    student = None
    log = []
    teacher, shipped = make_actor(args.teacher), load_exported(PRETRAINED_DIR / TASK, TASK)
    for r in range(args.rounds):
        t0 = time.perf_counter()
        fresh = load_exported(PRETRAINED_DIR / TASK, TASK)
        play = student if student is not None else fresh
        grades = []
        for s in range(first + r * n, first + (r + 1) * n):
            xs, ys, base, g = episode(play, teacher, shipped, s, teacher_plays=student is None)
            X += xs
            Y += ys
            B += base
            grades.append(g)
        y, b = np.asarray(Y), np.asarray(B)
        diff = np.any(y != b, axis=1)
        idx = np.r_[np.arange(len(Y)), np.repeat(np.flatnonzero(diff), max(args.upweight - 1, 0))]
        student = load_exported(PRETRAINED_DIR / TASK, TASK)
        losses = bc_train(student.module, [X[i] for i in idx], [Y[i] for i in idx], epochs=args.epochs, lr=args.lr,
                          minibatch_size=256, seed=r)
        student.module.eval()
        with torch.no_grad():
            pred = np.stack([student._greedy(student.module, X[i]) for i in range(len(X))])
        acc_all = float(np.all(pred == y, axis=1).mean())
        acc_diff = float(np.all(pred[diff] == y[diff], axis=1).mean()) if diff.any() else float("nan")
        out = export_module(student.module, args.out / f"r{r}", module_type=mc["type"], model_config=mc["model_config"],
                            module_id="default_policy", task_id=TASK, kind="single",
                            extra={"distilled_from": args.teacher, "round": r})
        row = {"round": r, "episodes": len(grades), "played_by": "teacher" if r == 0 else f"student r{r - 1}",
               "play_grade": float(np.mean(grades)), "rows": len(Y), "teacher_differs": float(diff.mean()),
               "loss_first_last": [losses[0], losses[-1]], "acc_all": acc_all, "acc_where_teacher_differs": acc_diff,
               "seconds": time.perf_counter() - t0, "export": str(out)}
        log.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "log.json").write_text(json.dumps({"command": "benchmarks/issue21_adv_spell_distill.py "
                                                   + " ".join(sys.argv[1:]), "rounds": log}, indent=1))


def ship(src: Path, record: str, selected: str) -> None:
    """Re-export round ``src`` (``.../rK``) as ``pretrained:adversarial_multitenant``."""
    import shutil

    log = json.loads((src.parent / "log.json").read_text())
    rnd = int(src.name.removeprefix("r"))
    rounds = [r for r in log["rounds"] if r["round"] <= rnd]
    pol = load_exported(src, TASK)
    mc = json.loads((src / "default_policy" / "module.json").read_text())
    out = PRETRAINED_DIR / TASK
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    export_module(pol.module, tmp, module_type=mc["type"], model_config=mc["model_config"], module_id="default_policy",
                  task_id=TASK, kind="single",
                  extra={"train": {"env_steps": rounds[-1]["rows"], "train_time_s": round(sum(r["seconds"] for r in rounds), 1),
                                   "seed": 0},
                         "command": "OMP_NUM_THREADS=1 .venv/bin/python " + log["command"],
                         "selected": f"round {rnd} of the distillation of {log['command'].split('--teacher ')[-1].split()[0]} "
                                     f"({selected})",
                         "record": record})
    shutil.rmtree(out)
    tmp.replace(out)
    print(f"shipped {src} as {out}")


if __name__ == "__main__":
    main()
