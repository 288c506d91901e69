"""``inferencegym train``: PPO on a task from a YAML config, as a Tune experiment."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

import typer

from inferencegym.cli.errors import fail, one_line
from inferencegym.cli.output import NOT_MEASURED, fmt_metric
from inferencegym.envs import get_task
from inferencegym.rl.config import ConfigError, load_config, parse_config


_SUMMARY_KEYS = (("training_iteration", "iterations", ".0f"), ("env_steps", "env steps", ",.0f"),
                 ("time_total_s", "time s", ".1f"), ("episode_return_mean", "return", ".4g"),
                 ("grade/score", "grade", ".3f"))


def last_measured(trial_dir: str | Path | None) -> dict[str, tuple[float, int]]:
    """``{"episode_return_mean" | "grade/score": (value, iteration)}``: the last iteration of the
    trial's Tune results in which the value was measured (an episode ended)."""
    from inferencegym.rl.report import GRADE_COL, RETURN_COL, read_progress

    if trial_dir is None:
        return {}
    try:
        series = read_progress(trial_dir)
    except (OSError, ValueError):
        return {}
    its = series.get("training_iteration", [])
    out = {}
    for key, col in (("episode_return_mean", RETURN_COL), ("grade/score", GRADE_COL)):
        vals = series.get(col, [])
        for i in range(len(vals) - 1, -1, -1):
            if math.isfinite(vals[i]):
                out[key] = (vals[i], int(its[i]) if i < len(its) and math.isfinite(its[i]) else i + 1)
                break
    return out


def format_summary(summary: dict, earlier: dict[str, tuple[float, int]] | None = None) -> str:
    """The last iteration's headline numbers in words. RLlib reports the episode return and the
    grade as NaN (or leaves them out) for an iteration in which no episode ended (an episode longer
    than the iteration's sample batch): then the value of the last iteration that measured one is
    printed with its iteration (``earlier``, from :func:`last_measured`), else "n/a (not measured
    ...)"; never ``nan``. The validation line below grades the returned policy."""
    parts = []
    for key, label, spec in _SUMMARY_KEYS:
        value = summary.get(key)
        if key in ("episode_return_mean", "grade/score") and fmt_metric(value, spec, "") == "" \
                and earlier and key in earlier:
            v, it = earlier[key]
            parts.append(f"{label} {v:{spec}} (iteration {it}; no episode ended in the last one)")
            continue
        missing = NOT_MEASURED if key in ("training_iteration", "env_steps", "time_total_s") else \
            "n/a (not measured: no episode ended during training)"
        parts.append(f"{label} {fmt_metric(value, spec, missing)}")
    return ", ".join(parts)


def train_command(
    config: Path = typer.Option(..., "--config", "-c", help="YAML training config (rllib_configs/*.yaml)"),
    steps: Optional[int] = typer.Option(None, "--steps", help="env-step budget (overrides stop.timesteps_total)"),
    iterations: Optional[int] = typer.Option(None, "--iterations", help="stop after this many PPO iterations"),
    seed: Optional[int] = typer.Option(None, "--seed", help="training seed (overrides the config)"),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="override a config value: --set ppo.minibatch_size=64 (repeatable)"),
    storage: Optional[Path] = typer.Option(None, "--storage", help="Tune storage dir (default <project>/ray_results)"),
    name: Optional[str] = typer.Option(None, "--name", help="experiment name (default: the config's name)"),
    resume: bool = typer.Option(False, "--resume", help="continue an interrupted experiment of the same name"),
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow", help="log the run to MLflow"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show a progress bar"),
    val_episodes: Optional[int] = typer.Option(
        None, "--val-episodes", min=0, help="validation episodes per candidate when picking the returned "
        "policy among the warm start and the kept checkpoints (default: evaluation.val_episodes; 0: last checkpoint)"),
) -> None:
    """Train PPO on the config's task (one Tune trial); prints the checkpoint and the MLflow run."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from rich.console import Console

    console = Console()
    try:  # the config is checked before Ray and torch are imported: a bad one fails in a second
        cfg = load_config(config).with_overrides(steps=steps, seed=seed, iterations=iterations, sets=set_)
        data = cfg.to_dict()
        if name:
            data["name"] = name
        if not mlflow:
            data["mlflow"]["enabled"] = False
        cfg = parse_config(data, str(config))

        get_task(cfg.task_id)  # an unknown task fails here, before Ray starts
    except (ConfigError, ValueError) as exc:
        fail(one_line(exc))
    from inferencegym.rl.pipeline import select_after_training  # lazy: imports Ray / torch (~5 s)
    from inferencegym.rl.train import (  # lazy: imports Ray / torch (~5 s); not at start-up
        run_training,
        summary_metrics,
    )
    out = run_training(cfg, storage_path=storage, resume=resume, progress=progress, config_path=str(config))
    trial_dir = Path(out.checkpoint).parent if out.checkpoint else None  # <trial>/checkpoint_N
    console.print(f"[bold green]done[/] in {out.wall_s:.1f} s: "
                  f"{format_summary(summary_metrics(out.metrics), last_measured(trial_dir))}")
    console.print(f"checkpoint: {out.checkpoint}")
    console.print(f"modules:    {out.module_dir}")
    n_val = cfg.evaluation.val_episodes if val_episodes is None else val_episodes
    selection = select_after_training(cfg, out, episodes=n_val, seed=cfg.evaluation.val_seed)
    returned = out.checkpoint
    if selection is not None:
        returned = selection.selected_path
        console.print(f"validation ({n_val} episodes from seed {cfg.evaluation.val_seed}, mean grade): "
                      + ", ".join(f"{r['candidate']} {r['val_score_mean']:.3f}" for r in selection.table))
        summ = selection.summary()
        if "validation/warm_start_score" in summ:
            console.print(f"warm start {summ['validation/warm_start_score']:.3f} | final checkpoint "
                          f"{summ.get('validation/final_score', float('nan')):.3f} | returned "
                          f"[bold]{selection.selected}[/] {summ['validation/selected_score']:.3f}")
        console.print(f"returned:   {returned}")
    if out.mlflow_run_id:
        console.print(f"mlflow run: {out.mlflow_run_id} ({out.tracking_uri})")
    console.print(f"evaluate:   inferencegym evaluate --policy checkpoint:{returned} --task {cfg.task_id}")


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
