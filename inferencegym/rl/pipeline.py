"""Train -> evaluate against baselines -> record: shared by ``inferencegym demo`` and
``benchmarks/train_ppo.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferencegym.rl.compare import compare, evaluate_one
from inferencegym.rl.config import TrainConfig
from inferencegym.rl.policy_loader import export_module, load_checkpoint
from inferencegym.rl.selection import VALIDATION_SEED, WARM_START, Selection, select_policy

CONFIRM_SEED = 700
"""First seed of the confirmation block (validation seeds: after the selection's 500.., before the
held-out 1000..)."""
from inferencegym.rl.train import TrainOutcome, run_training
from inferencegym.tracking import log_evaluation_run


def export_pretrained(module_dir: str | Path, cfg: TrainConfig, out_dir: str | Path, extra: dict | None = None,
                      replace: dict[str, str] | None = None) -> Path:
    """Export the trained modules of a checkpoint in the pickle-free pretrained format;
    ``replace``: module id -> a single saved module to export instead (the selected warm start)."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
    from ray.rllib.core.rl_module.rl_module import RLModule

    loaded = RLModule.from_checkpoint(str(module_dir))
    modules = {mid: loaded[mid] for mid in loaded.keys()} if isinstance(loaded, MultiRLModule) else {"default_policy": loaded}
    for mid, path in (replace or {}).items():
        modules[mid] = RLModule.from_checkpoint(str(path))
    out = Path(out_dir)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    for mid, m in modules.items():
        if mid not in cfg.modules:
            continue
        spec = cfg.modules[mid]
        export_module(m, out, module_type=spec.type, model_config=dict(spec.model_config_), module_id=mid,
                      task_id=cfg.task_id, kind=cfg.env, mapping=dict(cfg.policy_mapping), extra=extra)
    return out


def warm_start_dir(out: TrainOutcome) -> str | None:
    """What the warm start is loaded from: behaviour cloning's module directory, or, when it cloned
    several modules (the cluster router and a trained replica module), their common parent, so the
    warm start is evaluated with every cloned module (not the router with the task's initial knobs)."""
    paths = [Path(p) for p in (out.warm_start or {}).values()]
    if not paths:
        return None
    if len(paths) == 1 or len({p.parent for p in paths}) != 1:
        return str(paths[0])
    return str(paths[0].parent)


def select_after_training(cfg: TrainConfig, out: TrainOutcome, *, episodes: int,
                          seed: int = VALIDATION_SEED) -> Selection | None:
    """The best of the warm start and the kept checkpoints on ``episodes`` validation seeds (None
    without a checkpoint or with ``episodes == 0``); its ``validation/*`` grades are added to the
    training run's MLflow metrics, so every run records its warm start's grade next to its final one."""
    if episodes <= 0 or not out.checkpoint:
        return None
    warm_dir = warm_start_dir(out)
    selection = select_policy(cfg.task_id, last_checkpoint=out.checkpoint, warm_start_dir=warm_dir,
                              episodes=episodes, seed=seed)
    if out.mlflow_run_id and out.tracking_uri:
        import mlflow

        client = mlflow.MlflowClient(tracking_uri=out.tracking_uri)
        for k, v in selection.summary().items():
            client.log_metric(out.mlflow_run_id, k, v)
        client.set_tag(out.mlflow_run_id, "selected_candidate", selection.selected)
    return selection


def selected_export(record: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """(checkpoint module dir, module replacements) that export the policy a run returned: the
    selected Tune checkpoint, or the last checkpoint's modules with the warm start swapped in."""
    sel = record.get("selection")
    if not sel:
        return record["module_dir"], {}
    if sel["selected"] == WARM_START:
        path = Path(sel["selected_path"])
        return record["module_dir"], {path.name: str(path)}
    return str(Path(sel["selected_path"]) / "learner_group" / "learner" / "rl_module"), {}


def best_ppo_candidate(table: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best PPO checkpoint of a selection table on validation (ties: the later one)."""
    ppo = [(r["val_score_mean"], i, r) for i, r in enumerate(table) if r["candidate"] != WARM_START]
    return max(ppo, key=lambda x: (x[0], x[1]))[2] if ppo else None


def returned_checkpoint(record: dict[str, Any]) -> str | None:
    """The directory of the policy a run returned (what ``--policy checkpoint:<dir>`` loads): the
    selected candidate (a Tune checkpoint or the warm-start module), else the last checkpoint."""
    sel = record.get("selection")
    if sel:
        return sel["selected_path"]
    return record["train"].get("checkpoint")


def progress_csv(checkpoint: str | None) -> str | None:
    """Tune's ``progress.csv`` of the trial a checkpoint belongs to."""
    if not checkpoint:
        return None
    p = Path(checkpoint).parent / "progress.csv"
    return str(p) if p.is_file() else None


def train_and_compare(cfg: TrainConfig, *, config_path: str, episodes: int, seed: int,
                      baselines: list[str] | None, storage: str | Path | None = None,
                      command: str | None = None, progress: bool = True,
                      record_path: str | Path | None = None, resume: bool = False,
                      val_episodes: int = 0, val_seed: int = VALIDATION_SEED,
                      confirm_episodes: int = 0, confirm_seed: int = CONFIRM_SEED) -> dict[str, Any]:
    """Train ``cfg`` (Tune + MLflow), evaluate the greedy policy and the baselines on ``episodes``
    held-out seeds from ``seed``; returns (and optionally writes) the run record. ``resume``
    continues an interrupted experiment of the same name (``Tuner.restore``) instead of starting it
    again. With ``val_episodes > 0`` the evaluated policy is the best of the warm start and the kept
    checkpoints on validation seeds (:mod:`inferencegym.rl.selection`), and the warm start is
    evaluated on the held-out seeds too (row ``warm start (BC)``), so the record says whether PPO
    improved on it (``record["improved_on_warm_start"]``). With ``confirm_episodes > 0`` that verdict
    is a paired test on fresh validation seeds (:func:`confirm_improvement`): the selection's own seeds
    favour whichever candidate was lucky on them."""
    out = run_training(cfg, storage_path=storage, progress=progress, config_path=config_path, resume=resume)
    m = out.metrics
    steps = float(m.get("num_env_steps_sampled_lifetime") or 0.0)
    t = float(m.get("time_total_s") or 0.0)
    train = {"wall_s": round(out.wall_s, 1), "train_time_s": round(t, 1), "iterations": m.get("training_iteration"),
             "env_steps": int(steps), "env_steps_per_s": round(steps / t, 1) if t > 0 else None,
             "checkpoint": out.checkpoint, "mlflow_run_id": out.mlflow_run_id, "seed": cfg.seed}
    policy = load_checkpoint(out.checkpoint, cfg.task_id)
    # the module PPO trained (the replica agents' when the router is a fixed rule module)
    trainable = getattr(cfg, "trainable", None)
    trained_type = cfg.modules[trainable[0] if trainable else policy.module_id].type
    label = f"ppo ({trained_type})"
    warm_dir = warm_start_dir(out)
    selection = select_after_training(cfg, out, episodes=val_episodes, seed=val_seed)
    if selection is not None:
        policy = selection.policy
        label = (f"{label}, selected: {selection.selected}" if not selection.is_warm_start
                 else f"{WARM_START}, selected over every PPO checkpoint")
    if baselines is None and cfg.evaluation.baselines:  # the config's list (e.g. production routers)
        baselines = list(cfg.evaluation.baselines)
    rows = compare(policy, cfg.task_id, name=label, baselines=baselines,
                   episodes=episodes, seed=seed, progress=progress)
    record = {"task": cfg.task_id, "name": cfg.name, "config": config_path, "command": command,
              "progress_csv": progress_csv(out.checkpoint), "train": train, "rows": rows,
              "module_dir": out.module_dir, "tracking_uri": out.tracking_uri}
    if selection is not None:
        record["selection"] = {"val_seed": selection.val_seed, "val_episodes": selection.val_episodes,
                               "selected": selection.selected, "selected_path": selection.selected_path,
                               "table": selection.table, **selection.summary()}
        if warm_dir is not None:
            if selection.is_warm_start:  # the table still shows PPO: its best checkpoint on validation
                warm_row = rows[0]
                ppo = best_ppo_candidate(selection.table)
                if ppo is not None:
                    rows.insert(1, evaluate_one(load_checkpoint(ppo["path"], cfg.task_id), cfg.task_id,
                                                episodes=episodes, seed=seed,
                                                name=f"ppo ({trained_type}), "
                                                     f"best checkpoint {ppo['candidate']} (not returned)"))
            else:
                warm_row = evaluate_one(load_checkpoint(warm_dir, cfg.task_id), cfg.task_id, episodes=episodes,
                                        seed=seed, name=WARM_START)
                rows.insert(1, warm_row)
            record["improved_on_warm_start"] = bool(
                not selection.is_warm_start and rows[0]["score_mean"] > warm_row["score_mean"])
            if confirm_episodes > 0:
                conf = confirm_improvement(policy, load_checkpoint(warm_dir, cfg.task_id), cfg.task_id,
                                           episodes=confirm_episodes, seed=confirm_seed,
                                           selected_warm_start=selection.is_warm_start)
                record["confirmation"] = conf
                record["improved_on_warm_start"] = bool(conf["improved"])
    record["returned_checkpoint"] = returned_checkpoint(record)
    if record_path:
        Path(record_path).parent.mkdir(parents=True, exist_ok=True)
        Path(record_path).write_text(json.dumps(record, indent=2, default=str))
    return record


def confirm_improvement(policy: Any, warm: Any, task_id: str, *, episodes: int, seed: int = CONFIRM_SEED,
                        selected_warm_start: bool = False) -> dict[str, Any]:
    """Paired comparison of the returned policy with its warm start on ``episodes`` fresh validation
    seeds from ``seed`` (disjoint from the selection's and the held-out ones): per-seed grade
    differences, their mean and 95 % half-width; ``improved`` only when the whole interval is above
    0. When the warm start itself was returned nothing is run (``improved`` False)."""
    from inferencegym.evaluation.cluster import ci95

    if selected_warm_start:
        return {"seed": seed, "episodes": 0, "improved": False, "reason": "the warm start was returned"}
    a = evaluate_one(policy, task_id, episodes=episodes, seed=seed, name="returned")
    b = evaluate_one(warm, task_id, episodes=episodes, seed=seed, name=WARM_START)
    d = [x - y for x, y in zip(a["scores"], b["scores"])]
    mean = sum(d) / len(d)
    half = float(ci95(d)) if len(d) > 1 else float("inf")
    return {"seed": seed, "episodes": episodes, "returned_mean": a["score_mean"], "warm_start_mean": b["score_mean"],
            "diff_mean": mean, "diff_ci95": half, "better_seeds": sum(x > 0 for x in d),
            "worse_seeds": sum(x < 0 for x in d), "improved": bool(mean - half > 0)}


def log_comparison(record: dict[str, Any], report_files: dict[str, Path] | None = None) -> str | None:
    """Attach the comparison (metrics per policy) and the report to an MLflow evaluation run."""
    arts = list((report_files or {}).values())
    return log_evaluation_run(record["rows"], params={"task": record["task"], "train_run": record["train"].get("mlflow_run_id"),
                                                      "checkpoint": record["train"].get("checkpoint"),
                                                      "episodes": record["rows"][0]["episodes"] if record["rows"] else 0,
                                                      "seed": (record["rows"][0].get("seeds") or [None])[0] if record["rows"] else None},
                              artifacts=arts, experiment=f"evaluate/{record['task']}",
                              run_name=f"ppo vs baselines on {record['task']}")
