"""Mean one-step rollout advantage over the shipped adversarial module, per forecast phase of ``phase_rule``'s
detector and per candidate (issue 21, tenth session b). Reads the label files of ``issue21_adv10b_cli.py label``:
``--candidates DIR`` (the split x KV table, forecasts recovered by replaying the module on the seed: it is
deterministic) and ``--neighbours DIR`` (one-knob changes, forecasts stored). Prints and writes, per phase and
candidate: windows, mean advantage per window, and the first-order estimate of the grade change if the candidate
replaced the module's action in every window of that phase (sum of the one-window advantages x labelling stride /
200 windows, mean over episodes ± 95 %); the latter ignores interactions (see docs/bench/issue21.md).

    .venv/bin/python benchmarks/issue21_adv10b_classes.py --candidates ray_results/adv10b_labels \\
        --neighbours ray_results/adv10b_nb --json-out benchmarks/results/issue21/adv10b_classes.json
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
from inferencegym.evaluation.paired import ci95  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402

from issue21_adv10b_allknob import CANDS, NEIGHBOURS, TASK  # noqa: E402
from issue21_adv_actors import make_actor  # noqa: E402

PHASES = ("low", "low+mega", "high", "high+mega")


def forecasts(seed: int) -> list[int]:
    m, rule, env = make_actor("pretrained:adversarial_multitenant"), PhaseRulePolicy(TASK), LLMServeEnv(TASK)
    m.reset(seed)
    rule.reset(seed)
    obs, info = env.reset(seed=seed)
    out = []
    while True:
        a = ServeAction.from_any(m.act(obs, info))
        rule.act(obs, info)
        out.append(PHASES.index(rule.detector.forecast()))
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            return out


def table(adv: list[np.ndarray], phase: list[np.ndarray], names: list[str], stride: int) -> list[dict]:
    rows = []
    for p, pn in enumerate(PHASES):
        for k, n in enumerate(names):
            per_ep = np.array([a[ph == p, k].sum() * stride / 200 for a, ph in zip(adv, phase)])
            allv = np.concatenate([a[ph == p, k] for a, ph in zip(adv, phase)])
            rows.append({"phase": pn, "candidate": n, "windows": int(len(allv)),
                         "mean_adv_per_window": float(allv.mean()) if len(allv) else 0.0,
                         "first_order_grade": float(per_ep.mean()), "first_order_ci95": float(ci95(per_ep)),
                         "episodes_positive": int((per_ep > 0).sum())})
            r = rows[-1]
            print(f"{pn:10s} {n:28s} n={r['windows']:5d} adv/window {r['mean_adv_per_window']:+.4f} "
                  f"first-order grade {r['first_order_grade']:+.4f} ± {r['first_order_ci95']:.4f}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidates", type=Path, default=None)
    ap.add_argument("--neighbours", type=Path, default=None)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    out = {"command": "benchmarks/issue21_adv10b_classes.py " + " ".join(sys.argv[1:])}
    if args.candidates:
        adv, ph = [], []
        for p in sorted(args.candidates.glob(f"{TASK}_*.npz")):
            d = np.load(p)
            q = d["q"]
            adv.append(q - q[np.arange(len(q)), d["act"]][:, None])
            ph.append(np.asarray(forecasts(int(p.stem.split("_")[-1])))[d["w"].astype(int)])
        names = [f"split={c.prefill_decode_split},kv={c.kv_budget_fraction}" for c in CANDS]
        out["candidates"] = {"episodes": len(adv), "rows": table(adv, ph, names, 2)}
    if args.neighbours:
        adv, ph = [], []
        for p in sorted(args.neighbours.glob(f"{TASK}_*.npz")):
            d = np.load(p)
            adv.append(d["q"][:, 1:] - d["q"][:, :1])
            ph.append(d["phase"])
        names = [f"{k}={v}" for k, v in NEIGHBOURS]
        out["neighbours"] = {"episodes": len(adv), "rows": table(adv, ph, names, 4)}
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
