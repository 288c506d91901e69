"""Ship the policy a training run returned as ``pretrained:TASK`` (issue 21's ablation runs carry a
``--tag``, and ``benchmarks/train_ppo.py --export-pretrained`` exports untagged runs only).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/export_selected.py --record benchmarks/results/training/T_TAG.json \\
        [--set a.b=v ...]   # the same --set overrides the run was trained with (module type / model_config)
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/export_selected.py --clone TASK [--set ...]

``--clone TASK`` ships the behaviour-cloning warm start of ``rllib_configs/TASK.yaml`` alone (no PPO):
for a task whose training returned its warm start anyway (``static_workload``: one phase, nothing to
adapt to) when the flat action space changed under the old module.
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
    ap.add_argument("--record", type=Path, default=None)
    ap.add_argument("--clone", default=None, help="task: export its config's BC warm start")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    args = ap.parse_args()
    if args.clone:
        clone(args.clone, args.sets)
        return
    if args.record is None:
        ap.error("give --record or --clone")
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


def clone(task: str, sets: list[str]) -> None:
    import shlex
    import shutil
    import tempfile

    import torch
    from ray.rllib.core.rl_module.rl_module import RLModule

    from inferencegym.rl.bc import warm_start
    from inferencegym.rl.policy_loader import export_module

    torch.set_num_threads(1)
    cfg = load_config(REPO / "rllib_configs" / f"{task}.yaml").with_overrides(sets=sets)
    out = REPO / "inferencegym" / "data" / "pretrained" / task
    with tempfile.TemporaryDirectory() as tmp:
        paths = warm_start(cfg, out_dir=tmp)
        module = RLModule.from_checkpoint(paths["default_policy"])
        shutil.rmtree(out, ignore_errors=True)
        spec = cfg.modules["default_policy"]
        export_module(module, out, module_type=spec.type, model_config=dict(spec.model_config_),
                      module_id="default_policy", task_id=task, kind=cfg.env,
                      extra={"train": {"env_steps": 0, "train_time_s": 0.0, "seed": cfg.seed},
                             "selected": f"warm start (BC of {cfg.bc.baseline})",
                             "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/export_selected.py --clone "
                                        + shlex.join([task] + [x for s in sets for x in ("--set", s)])})
    print(f"exported the BC warm start ({cfg.bc.baseline}) of {task} to {out}")


if __name__ == "__main__":
    main()
