"""``inferencegym train``: PPO on a task from a YAML config, as a Tune experiment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from inferencegym.rl.config import ConfigError, load_config, parse_config


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
) -> None:
    """Train PPO on the config's task (one Tune trial); prints the checkpoint and the MLflow run."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from rich.console import Console

    from inferencegym.rl.train import (  # lazy: imports Ray / torch (~5 s); not at start-up
        run_training,
        summary_metrics,
    )

    console = Console()
    try:
        cfg = load_config(config).with_overrides(steps=steps, seed=seed, iterations=iterations, sets=set_)
        data = cfg.to_dict()
        if name:
            data["name"] = name
        if not mlflow:
            data["mlflow"]["enabled"] = False
        cfg = parse_config(data, str(config))
        from inferencegym.envs import get_task

        get_task(cfg.task_id)  # an unknown task fails here, before Ray starts
    except (ConfigError, ValueError) as exc:
        from inferencegym.cli.errors import fail, one_line

        fail(one_line(exc))
    out = run_training(cfg, storage_path=storage, resume=resume, progress=progress, config_path=str(config))
    console.print(f"[bold green]done[/] in {out.wall_s:.1f} s: {summary_metrics(out.metrics)}")
    console.print(f"checkpoint: {out.checkpoint}")
    console.print(f"modules:    {out.module_dir}")
    if out.mlflow_run_id:
        console.print(f"mlflow run: {out.mlflow_run_id} ({out.tracking_uri})")
    console.print(f"evaluate:   inferencegym evaluate --policy checkpoint:{out.checkpoint} --task {cfg.task_id}")


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
