"""Markdown tables of the training benchmark records (benchmarks/results/training/*.json).

    .venv/bin/python benchmarks/training_tables.py [DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
        base = {x["policy"]: x for x in rows[1:]}
        ppo = rows[0]
        for name, b in base.items():
            if ppo.get("ttft_p99_s") and b.get("ttft_p99_s"):
                d = 100.0 * (b["ttft_p99_s"] - ppo["ttft_p99_s"]) / b["ttft_p99_s"]
                print(f"- p99 TTFT vs {name}: {d:+.1f}% (positive = PPO lower); grade difference "
                      f"{ppo['score_mean'] - b['score_mean']:+.3f}")
        print(f"\nCommand: `{r.get('command')}`")


if __name__ == "__main__":
    main()
