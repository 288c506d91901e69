"""Paired grades of adversarial actors against ``phase_rule`` and the shipped module (issue 21, ninth session).

Each ``--policy NAME=SPEC`` (specs of ``issue21_adv_spell_policy.make_actor``: ``spell:M.pt@MARGIN[@MODE]``,
``export:DIR``, ``pretrained:adversarial_multitenant``, ``phase_rule``) plays the same seeds; differences
are per-seed, ± the project's 95 % t half-width (``inferencegym.evaluation.paired.ci95``), better / worse,
the worst seed.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/issue21_adv_spell_eval.py --seeds 500 40 \\
        --policy a=spell:ray_results/spell_r0.pt@0.1 --json-out benchmarks/results/issue21/ninth_X.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from inferencegym.envs.actions import ServeAction  # noqa: E402
from inferencegym.envs.serve_env import LLMServeEnv  # noqa: E402
from inferencegym.evaluation.paired import paired_difference  # noqa: E402

from issue21_adv_actors import TASK, make_actor  # noqa: E402


def grade(actor, seed: int) -> float:
    env = LLMServeEnv(TASK)
    actor.reset(seed)
    obs, info = env.reset(seed=seed)
    while True:
        obs, _, term, trunc, info = env.step(ServeAction.from_any(actor.act(obs, info)))
        if term or trunc:
            return float(env.grade().score)


def paired(a: np.ndarray, b: np.ndarray, seeds: list[int]) -> dict:
    d = a - b
    return {**paired_difference(a, b), "worst": float(d.min()), "worst_seed": int(seeds[int(d.argmin())]),
            "median": float(np.median(d))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), required=True)
    ap.add_argument("--policy", action="append", default=[], help="NAME=SPEC (repeatable)")
    ap.add_argument("--reuse", type=Path, default=None, help="a JSON of this script on the same seeds: its "
                    "phase_rule and module grades are reused")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    seeds = list(range(args.seeds[0], args.seeds[0] + args.seeds[1]))
    specs = {"phase_rule": "phase_rule", "module": "pretrained:adversarial_multitenant"}
    for p in args.policy:
        name, sep, spec = p.partition("=")
        if not sep:
            sys.exit(f"--policy takes NAME=SPEC; got {p!r}")
        specs[name] = spec
    for n, s in specs.items():  # bad specs fail here, in one line, before any episode runs
        try:
            make_actor(s)
        except ValueError as e:
            sys.exit(f"--policy {n}={s}: {e}")
    reuse = {}
    if args.reuse:  # per-seed grades are deterministic: take the baselines' from an earlier run on these seeds
        old = json.loads(args.reuse.read_text())
        if old["seeds"] != seeds:
            sys.exit(f"--reuse {args.reuse}: its seeds are not {seeds[0]}..{seeds[-1]}")
        reuse = {r["name"]: np.asarray(r["scores"]) for r in old["rows"] if r["name"] in ("phase_rule", "module")}
    scores = {n: reuse[n] if n in reuse else np.asarray([grade(make_actor(s), seed) for seed in seeds])
              for n, s in specs.items()}
    rows = []
    for n, s in scores.items():
        r = {"name": n, "spec": specs[n], "mean": float(s.mean()), "scores": [float(v) for v in s]}
        if n != "phase_rule":
            r["minus_rule"] = paired(s, scores["phase_rule"], seeds)
        if n not in ("phase_rule", "module"):
            r["minus_module"] = paired(s, scores["module"], seeds)
        rows.append(r)
        line = f"{n:28s} {s.mean():.4f}"
        for k in ("minus_rule", "minus_module"):
            if k in r:
                q = r[k]
                line += (f" | {k} {q['mean']:+.4f} ± {q['ci95']:.4f} ({q['better']}/{q['worse']}), "
                         f"worst {q['worst']:+.4f} (seed {q['worst_seed']})")
        print(line, flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "benchmarks/issue21_adv_spell_eval.py " + " ".join(sys.argv[1:]),
                                             "seeds": seeds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
