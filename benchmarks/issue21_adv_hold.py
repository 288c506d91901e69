"""Is the shipped adversarial module's early guard drop a shorter fixed hold? (issue 21, eighth session)

``phase_rule`` with ``mega_hold_windows`` 1 / 2 / 3 / 5 (shipped: 4) on training seeds, paired with the
shipped rule. Usage: ``PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/issue21_adv_hold.py FIRST N``
(writes ``benchmarks/results/issue21/eighth_adv_hold_FIRST.json``).
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import json  # noqa: E402
import numpy as np  # noqa: E402
from inferencegym.evaluation.cluster import ci95  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402
from issue21_adv_deviations import TASK, play  # noqa: E402
first, n = int(sys.argv[1]), int(sys.argv[2])
if first + n > 1000:
    sys.exit("training / validation seeds only (< 1000)")
seeds = range(first, first + n)
base = np.array([play(PhaseRulePolicy(TASK), s, None)[0] for s in seeds])
g = json.load(open("benchmarks/results/issue21/eighth_adv_guards_train.json"))
out = {}
for k in (1, 2, 3, 5):
    sc = np.array([play(PhaseRulePolicy(TASK, settings={"mega_hold_windows": float(k)}), s, None)[0] for s in seeds])
    d = sc - base
    out[k] = sc.tolist()
    print(f"mega_hold_windows {k}: {sc.mean():.4f} minus rule(4) {d.mean():+.4f} ± {ci95(list(d)):.4f} ({(d>0).sum()}/{(d<0).sum()})", flush=True)
if first == 100 and n == 120:
    m = np.array(g["rows"][0]["scores"])
    print(f"module minus rule(4) {np.mean(m - base):+.4f}")
json.dump({"seeds": list(seeds), "rule_hold4": base.tolist(), "holds": out}, open(f"benchmarks/results/issue21/eighth_adv_hold_{first}.json", "w"))
