"""``inferencegym tune``: a Tune sweep over reward shaping and PPO hyperparameters."""

from __future__ import annotations

import typer

from inferencegym.cli.errors import fail, one_line
from inferencegym.cli.output import print_table
from inferencegym.rl.config import ConfigError


def register(app: typer.Typer) -> None:
    @app.command("tune")
    def tune_cmd(
        sweep: str = typer.Option(..., "--sweep", help="Sweep file, e.g. tune/bursty_reward_sweep.yaml"),
        num_samples: int = typer.Option(None, "--num-samples", min=1, help="Override the file's num_samples."),
        storage: str = typer.Option(None, "--storage", help="Tune storage dir (default <project>/ray_results)."),
        resume: bool = typer.Option(True, "--resume/--no-resume",
                                    help="Continue an interrupted sweep of the same name (Tuner.restore)."),
        json_out: bool = typer.Option(False, "--json", help="Print the outcome as one JSON object."),
    ) -> None:
        """Run a sweep: every trial is an MLflow run (experiment sweep/<name>); the objective is the
        grader score on held-out seeds; the best trial's policy is registered in the MLflow registry.

        Example: inferencegym tune --sweep tune/bursty_reward_sweep.yaml --num-samples 4
        """
        import json
        import os

        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from rich.console import Console
        from rich.table import Table

        # The sweep file is validated before Ray, torch and MLflow are imported (importing
        # run_sweep pulls them in, ~15 s on a busy machine): a malformed file fails in one line, fast.
        from inferencegym.apps.tuning.schema import OBJECTIVE, SweepError, load_sweep

        console = Console(stderr=json_out)
        try:
            spec, cfg = load_sweep(sweep)
        except (SweepError, ConfigError) as exc:
            fail(one_line(exc, limit=600))
        from inferencegym.apps.tuning import run_sweep  # lazy: imports Ray / torch / MLflow
        try:
            out = run_sweep(spec, cfg, num_samples=num_samples, storage_path=storage, resume=resume,
                            progress=not json_out, sweep_file=sweep)
        except SweepError as exc:
            fail(one_line(exc, limit=600))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:  # stopped before Tune started, or a second Ctrl-C / SIGTERM
            console.print("[yellow]interrupted[/yellow] before the sweep could save its state; run the same "
                          "command again to resume or start it")
            raise typer.Exit(130) from None
        if json_out:
            print(json.dumps({"experiment": out.experiment, "experiment_path": out.experiment_path,
                              "tracking_uri": out.tracking_uri, "trials": out.trials, "best": out.best,
                              "registered_model": out.registered_model,
                              "registered_version": out.registered_version,
                              "warm_start": out.warm_start, "interrupted": out.interrupted,
                              "wall_s": out.wall_s},
                             default=str))
            return
        table = Table(title=f"sweep {spec.name} ({len(out.trials)} trials, {out.wall_s:.0f} s)")
        table.add_column("trial")
        table.add_column(OBJECTIVE, justify="right")
        table.add_column("iters", justify="right")
        table.add_column("params")
        for t in sorted(out.trials, key=lambda t: -(t[OBJECTIVE] or -1e9)):
            g = t[OBJECTIVE]
            table.add_row(str(t["trial_id"]), "error" if t["error"] else (f"{g:.3f}" if g is not None else "-"),
                          str(t["training_iteration"]),
                          ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in t["params"].items()))
        print_table(table, console=console)
        console.print(f"warm start of every trial: {out.warm_start}")
        if out.interrupted:
            console.print(f"[yellow]interrupted[/yellow]: unfinished trials were saved; run the same command "
                          f"again to resume ({out.experiment_path}). No model was registered.")
        if out.registered_model:
            console.print(f"best trial {out.best['trial_id']} registered as "
                          f"[bold]models:/{out.registered_model}/{out.registered_version}[/bold]; serve it with "
                          f"inferencegym serve --policy checkpoint:{out.best['checkpoint']}")
        console.print(f"MLflow: experiment {out.experiment!r} at {out.tracking_uri} "
                      f"(inferencegym dashboard)")
