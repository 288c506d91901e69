"""Ship the policy a training run returned as ``pretrained:TASK`` (issue 21's ablation runs carry a
``--tag``, and ``benchmarks/train_ppo.py --export-pretrained`` exports untagged runs only).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/export_selected.py --record benchmarks/results/training/T_TAG.json \\
        [--set a.b=v ...]   # the same --set overrides the run was trained with (module type / model_config)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inferencegym.rl.config import load_config  # noqa: E402
from inferencegym.rl.pipeline import export_pretrained, selected_export  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", type=Path, required=True)
    ap.add_argument("--set", dest="sets", action="append", default=[])
    args = ap.parse_args()
    record = json.loads(args.record.read_text())
    cfg = load_config(REPO / record["config"]).with_overrides(sets=args.sets)
    module_dir, replace = selected_export(record)
    sel = record.get("selection") or {}
    out = export_pretrained(module_dir, cfg, REPO / "inferencegym" / "data" / "pretrained" / record["task"],
                            replace=replace,
                            extra={"train": {k: record["train"][k] for k in ("env_steps", "train_time_s", "seed")},
                                   "command": record.get("command"), "selected": sel.get("selected"),
                                   "record": str(args.record)})
    print(f"exported {sel.get('selected', 'last checkpoint')} of {args.record} to {out}")


if __name__ == "__main__":
    main()
