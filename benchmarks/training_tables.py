"""Markdown tables of the training benchmark records (benchmarks/results/training/*.json).

    .venv/bin/python benchmarks/training_tables.py [DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]


def paired(a, b, *, higher: bool, fmt: str = "+.3f") -> str:
    """Mean of a - b over paired seeds with a 95% t-interval, and how often a is better."""
    if not a or not b or len(a) != len(b):
        return "n/a"
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = len(d)
    half = float(stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    better = int((d > 0).sum() if higher else (d < 0).sum())
    return f"{d.mean():{fmt}} ± {half:.3f} (better on {better}/{n})"


def main() -> None:
    from inferencegym.rl.report import load_records, table_markdown

    recs = load_records(sys.argv[1] if len(sys.argv) > 1 else REPO / "benchmarks" / "results" / "training")
    print("| config | env steps | train time s | env steps/s (training) | iterations |")
    print("|---|---|---|---|---|")
    for r in recs:
        t = r["train"]
        print(f"| {r['name']} | {t['env_steps']:,} | {t['train_time_s']} | {t['env_steps_per_s']} | {t['iterations']} |")
    for r in recs:
        rows = r["rows"]
        print(f"\n### {r['name']} ({r['task']}; {rows[0]['episodes']} held-out seeds "
              f"{rows[0]['seeds'][0]}..{rows[0]['seeds'][-1]})\n")
        print(table_markdown(rows))
        # the returned policy: a PPO checkpoint, or the warm start when selection kept it
        ppos = [x for x in rows if (x["policy"].startswith("ppo") or "selected" in x["policy"])
                and "not returned" not in x["policy"]]  # PPO's row shown beside a returned warm start
        base = [x for x in rows if x not in ppos]
        for ppo in ppos:
            print(f"\nPaired on the same seeds, `{ppo['policy']}` (the returned policy) minus each baseline "
                  f"(mean, 95% t-interval, seeds where it is better):\n")
            for b in base:
                line = f"- vs {b['policy']}: grade {paired(ppo.get('scores'), b.get('scores'), higher=True)}"
                pt = (ppo.get("per_seed") or {}).get("ttft_p99_s")
                bt = (b.get("per_seed") or {}).get("ttft_p99_s")
                if pt and bt:
                    rel = 100.0 * (np.mean(pt) - np.mean(bt)) / np.mean(bt)
                    line += f"; p99 TTFT {paired(pt, bt, higher=False, fmt='.3f')} s ({rel:+.1f}% of the mean)"
                print(line)
        print(f"\nCommand: `{r.get('command')}`")
        sel = r.get("selection")
        if sel and "command" in sel:  # benchmarks/select_checkpoint.py (second session's runs)
            print(f"\nCheckpoint selection (`{sel['command']}`): greedy grade on validation seeds "
                  f"{sel['val_seed']}..{sel['val_seed'] + sel['val_episodes'] - 1} per checkpoint: "
                  + ", ".join(f"{e['checkpoint'][-3:]}@it{e['iteration']}: {e['val_score_mean']:.3f}"
                              for e in sel["table"]) + f"; selected {sel['selected']}.")
        elif sel:  # selection inside `inferencegym train` / train_and_compare (rl/selection.py)
            print(f"\nSelection of the returned policy among the warm start and the kept checkpoints "
                  f"(greedy grade on validation seeds {sel['val_seed']}..{sel['val_seed'] + sel['val_episodes'] - 1}): "
                  + ", ".join(f"{e['candidate']}: {e['val_score_mean']:.3f}" for e in sel["table"])
                  + f"; returned {sel['selected']} (PPO improved on the warm start: "
                  f"{'yes' if r.get('improved_on_warm_start') else 'no'}).")

if __name__ == "__main__":
    main()
