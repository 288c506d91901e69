"""Where bursty_workload's privileged lookahead ceiling leaves ``phase_rule`` (issue 21, sixth
session): the ceiling (``evaluation.lookahead.CEILING``) is played on each seed and every window is
counted by (hidden phase, the rule's configuration, the ceiling's configuration), tier and KV budget
separately.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/issue21_ceiling_trace.py 0 1 2 [--json-out FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inferencegym.envs.serve_env import LLMServeEnv  # noqa: E402
from inferencegym.evaluation.lookahead import CEILING, lookahead_episode  # noqa: E402

TASK = "bursty_workload"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("seeds", type=int, nargs="+")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    out = []
    for seed in args.seeds:
        pairs: list[tuple] = []
        ep = lookahead_episode(TASK, seed, on_step=lambda o, played, rule: pairs.append((rule, played)), **CEILING)
        env = LLMServeEnv(TASK, privileged=True)
        env.reset(seed=seed)
        wl = env._wl  # noqa: SLF001 (privileged: the hidden phase sequence)
        tier: collections.Counter = collections.Counter()
        kv: collections.Counter = collections.Counter()
        for w, (rule, played) in enumerate(pairs):
            ph = wl.phase_names[int(wl.phase[w])]
            tier[f"{ph}: rule {rule.quantization_tier} -> ceiling {played.quantization_tier}"] += 1
            kv[f"{ph}: rule {rule.kv_budget_fraction} -> ceiling {played.kv_budget_fraction}"] += 1
        rec = {"seed": seed, "ceiling": ep.score, "tier": dict(sorted(tier.items())), "kv": dict(sorted(kv.items()))}
        out.append(rec)
        print(json.dumps(rec), flush=True)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"command": "OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python "
                                             "benchmarks/issue21_ceiling_trace.py " + " ".join(sys.argv[1:]),
                                             "seeds": out}, indent=2))


if __name__ == "__main__":
    main()
