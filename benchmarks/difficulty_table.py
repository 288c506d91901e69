"""The difficulty table: every baseline on every single-agent task over held-out seeds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/difficulty_table.py --episodes 20 --seed 1000 \\
        [--tasks adversarial_multitenant,bursty_workload] [--ppo pretrained] [--lookahead] \\
        [--json-out FILE] [--json]

Seeds 1000.. are disjoint from the search seeds of best_static / clairvoyant / phase_rule (0..N-1)
and from the training seeds. Columns (issue 21): random, the production rules (static_default =
vLLM's defaults, heuristic), best_static, phase_rule (the best observable rule), PPO (``--ppo
pretrained``: the shipped ``pretrained:TASK`` module, or ``--ppo checkpoint:PATH``; ``none`` to skip),
the clairvoyant table and, with ``--lookahead`` (slow: one full-episode rollout per alternative
action per window; ``benchmarks/lookahead_table.py`` runs it on fewer seeds), the privileged
ceiling ``lookahead`` (``inferencegym.evaluation.lookahead``).
Prints a Markdown table (mean grade +- 95 % CI) and paired margins per task (mean of per-seed
differences +- the project's ``ci95`` of those differences, seeds where the first is higher), and
checks: random < static_default < heuristic <= best_static <= phase_rule on every task (phase_rule
only where the task has phases); lookahead >= phase_rule on every seed. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from inferencegym.envs import list_tasks
from inferencegym.evaluation.cluster import ci95
from inferencegym.evaluation.lookahead import lookahead_episode
from inferencegym.evaluation.single import evaluate_policy

RULES = ("random", "static_default", "heuristic", "best_static", "phase_rule", "clairvoyant")
PAIRS = (("phase_rule", "best_static"), ("ppo", "phase_rule"), ("ppo", "best_static"),
         ("clairvoyant", "phase_rule"), ("lookahead", "phase_rule"), ("lookahead", "clairvoyant"))
"""(a, b): paired a - b per task, where both were run."""


def paired_margin(a: list[float], b: list[float]) -> tuple[float, float, int]:
    """Mean of a - b over the same seeds, the 95 % half-width (``ci95``) and how many seeds a > b."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    return float(d.mean()), ci95(d.tolist()), int((d > 1e-12).sum())


def checks(scores: dict[str, dict[str, list[float]]]) -> list[tuple[str, bool]]:
    out = []
    for task, s in scores.items():
        m = {k: float(np.mean(v)) for k, v in s.items()}
        out.append((f"{task}: random < static_default < heuristic <= best_static <= phase_rule",
                    m["random"] < m["static_default"] < m["heuristic"] <= m["best_static"]
                    <= m["phase_rule"] + 1e-9))
        if "lookahead" in s:
            out.append((f"{task}: lookahead >= phase_rule on every seed",
                        all(x >= y - 1e-9 for x, y in zip(s["lookahead"], s["phase_rule"]))))
    return out


def run(tasks: list[str], episodes: int, seed: int, ppo: str, lookahead: bool, log=print) -> list[dict]:
    rows = []
    for t in tasks:
        pols = list(RULES)
        specs = {p: p for p in pols}
        if ppo != "none":
            import inferencegym.rl  # noqa: F401  (registers the checkpoint: / pretrained: schemes)

            specs["ppo"] = f"pretrained:{t}" if ppo == "pretrained" else ppo
        for name, spec in specs.items():
            t0 = time.time()
            d = evaluate_policy(spec, t, episodes=episodes, seed=seed, policy_name=name).to_json_dict()
            d["wall_s"] = round(time.time() - t0, 1)
            d["spec"] = spec
            rows.append(d)
            log(f"{t} {name}: {d['score_mean']:.4f} ({d['wall_s']} s)")
        if lookahead:
            t0 = time.time()
            eps = [lookahead_episode(t, seed + i) for i in range(episodes)]
            sc = [e.score for e in eps]
            rows.append({"policy": "lookahead", "task": t, "episodes": episodes,
                         "seeds": [seed + i for i in range(episodes)], "scores": sc,
                         "score_mean": float(np.mean(sc)), "score_ci95": ci95(sc),
                         "rollouts": [e.metrics["lookahead/rollouts"] for e in eps],
                         "wall_s": round(time.time() - t0, 1), "spec": "lookahead (privileged)"})
            log(f"{t} lookahead: {np.mean(sc):.4f} ({rows[-1]['wall_s']} s)")
    return rows


def markdown(rows: list[dict], tasks: list[str]) -> str:
    by = {(r["task"], r["policy"]): r for r in rows}
    cols = [p for p in (*RULES[:5], "ppo", *RULES[5:], "lookahead") if any((t, p) in by for t in tasks)]
    lines = [f"| task | {' | '.join(cols)} |", f"|---|{'---|' * len(cols)}"]
    for t in tasks:
        cells = [f"{by[(t, p)]['score_mean']:.3f} ± {by[(t, p)]['score_ci95']:.3f}" if (t, p) in by else "-"
                 for p in cols]
        lines.append(f"| {t} | {' | '.join(cells)} |")
    lines.append("")
    for t in tasks:
        for a, b in PAIRS:
            if (t, a) in by and (t, b) in by:
                d, ci, k = paired_margin(by[(t, a)]["scores"], by[(t, b)]["scores"])
                lines.append(f"- {t}: {a} - {b} = {d:+.3f} ± {ci:.3f} ({a} higher on {k}/"
                             f"{len(by[(t, b)]['scores'])} seeds)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--ppo", default="pretrained", help="pretrained | checkpoint:PATH | none")
    ap.add_argument("--lookahead", action="store_true", help="also run the (slow) privileged ceiling")
    ap.add_argument("--no-lookahead", action="store_true", help="skip the ceiling (the default)")
    ap.add_argument("--json-out", default=None, help="write every row (per-seed scores) to this file")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of Markdown")
    args = ap.parse_args()
    tasks = [t.task_id for t in list_tasks(kind="single")] if args.tasks == "all" else args.tasks.split(",")
    rows = run(tasks, args.episodes, args.seed, args.ppo, args.lookahead and not args.no_lookahead,
               log=lambda s: print(s, file=sys.stderr, flush=True))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(rows, fh, indent=1)
    print(json.dumps(rows) if args.json else markdown(rows, tasks))
    scores: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        scores.setdefault(r["task"], {})[r["policy"]] = r["scores"]
    ok = True
    for name, passed in checks(scores):
        print(f"{'PASS' if passed else 'FAIL'}  {name}", file=sys.stderr if args.json else sys.stdout)
        ok &= passed
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
