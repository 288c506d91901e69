"""``inferencegym evaluate``: grade policies on single-agent tasks over seeds S, S+1, ..."""

from __future__ import annotations

import json
import time
from typing import List, Optional

import typer

from inferencegym.cli.errors import fail, one_line
from inferencegym.cli.output import fmt_metric, print_table
from inferencegym.envs import get_task, list_tasks
from inferencegym.evaluation.single import evaluate_policy
from inferencegym.policies import get_policy


def _split(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def register(app: typer.Typer) -> None:
    @app.command("evaluate")
    def evaluate(
        policy: List[str] = typer.Option(..., "--policy", "-p",
                                         help="policy spec (name, checkpoint:PATH, pretrained:TASK, "
                                              "http://URL); repeat or comma-separate"),
        task: str = typer.Option("all", "--task", "-t", help="task id, comma-separated ids, or 'all'"),
        episodes: int = typer.Option(20, "--episodes", "-n", min=1, help="episodes per (policy, task)"),
        seed: int = typer.Option(1000, "--seed", "-s", min=0, max=2**32 - 1,
                                 help="first seed; episodes use S, S+1, ..."),
        episode_windows: Optional[int] = typer.Option(None, "--episode-windows", min=1, max=100_000,
                                                      help="override the episode length (steps)"),
        as_json: bool = typer.Option(False, "--json", help="print a JSON list, one object per (policy, task)"),
        mlflow: bool = typer.Option(False, "--mlflow/--no-mlflow", help="log the run to MLflow"),
        load_windows: Optional[str] = typer.Option(None, "--load-windows",
                                                   help="control tasks: ServeGen *__windows.parquet file"),
        split: str = typer.Option("test", "--split", help="control tasks: days of train|validation|test"),
        failures: bool = typer.Option(False, "--failures/--no-failures",
                                      help="control tasks: replica crashes and stragglers"),
    ) -> None:
        """Evaluate policies: mean grade with 95% CI, p99 TTFT, throughput and cost per task."""
        from inferencegym.cli.control import evaluate_control_rows, is_control_task, print_control_rows

        if task != "all" and any(is_control_task(t) for t in _split([task])):
            ctl = _split([task])
            if not all(is_control_task(t) for t in ctl):
                raise typer.BadParameter("evaluate control tasks (cluster_autoscaling, cluster_admission) "
                                         "separately from the other tasks")
            if any(p.startswith(("http://", "https://")) for p in _split(policy)):
                import inferencegym.apps.policy_endpoint  # noqa: F401  (registers http(s):// for control tasks)
            rows = evaluate_control_rows(_split(policy), ctl, episodes=episodes, seed=seed, split=split,
                                         load_windows=load_windows, failures=failures,
                                         episode_windows=episode_windows)
            if as_json:
                typer.echo(json.dumps(rows))
            else:
                print_control_rows(rows)
            return
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Table

        policies = _split(policy)
        if not policies:
            fail("give at least one --policy (a name, checkpoint:PATH, pretrained:TASK or http://URL)")
        endpoint_errors: tuple[type[BaseException], ...] = ()
        if any(p.startswith(("checkpoint:", "pretrained:")) for p in policies):
            import inferencegym.rl  # noqa: F401  (registers the checkpoint: and pretrained: handlers; imports Ray / torch)
        if any(p.startswith(("http://", "https://")) for p in policies):
            # registers the http:// and https:// handlers of the policy registry (docs/architecture.md:
            # "a registry low down gets handlers from above"); lazy: imports Ray / torch (~5 s)
            import inferencegym.apps.policy_endpoint  # noqa: F401
            from inferencegym.apps.policy_endpoint.client import EndpointError

            endpoint_errors = (EndpointError,)
        if task == "all":
            tasks = [t.task_id for t in list_tasks(kind="single")]
        else:
            tasks = _split([task])
        if not tasks:
            fail("give at least one --task (a task id, comma-separated ids, or 'all')")
        try:
            # cluster tasks (kind="cluster") run in the multi-agent ClusterEnv: envs/cluster_evaluation.py
            cluster = [t for t in tasks if get_task(t).kind == "cluster"]
            tasks = [t for t in tasks if t not in cluster]
            built = {(p, t): get_policy(p, t) for p in policies for t in tasks}
            for p in policies:
                for t in cluster:
                    get_policy(p, t)  # validates the name before anything runs
        except ValueError as exc:
            fail(one_line(exc))
        except endpoint_errors as exc:  # an unreachable or failing endpoint, before anything ran
            fail(one_line(exc))

        # Progress and partial results go to stderr (stdout keeps the table or the JSON): a bar while
        # stderr is a terminal, and in every case one line per (policy, task) as it finishes, so a
        # long run (--task all --episodes 20: minutes) shows where it is, in a log file too.
        err = Console(stderr=True, soft_wrap=True, highlight=False)
        n_runs = len(built) + len(policies) * len(cluster)
        results, cluster_rows, done = [], [], 0

        def partial(row: dict, wall_s: float) -> None:
            nonlocal done
            done += 1
            prog.console.print(f"\\[{done}/{n_runs}] {escape(row['task'])} {escape(row['policy'])}: score "
                               f"{row['score_mean']:.3f} ± {row['score_ci95']:.3f}, p99 TTFT "
                               f"{fmt_metric(row.get('ttft_p99_s'), '.3f', '-')} s ({episodes} episodes, "
                               f"{wall_s:.1f} s)")

        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=err, transient=True) as prog:
                bar = prog.add_task("evaluating", total=n_runs * episodes)
                for (p, t), pol in built.items():
                    prog.update(bar, description=escape(f"{p} on {t}"))
                    t0 = time.perf_counter()
                    res = evaluate_policy(pol, t, episodes=episodes, seed=seed, policy_name=p,
                                          episode_windows=episode_windows,
                                          on_episode=lambda ep: prog.advance(bar))
                    results.append(res)
                    partial(res.to_json_dict(), time.perf_counter() - t0)
                for p in policies:
                    for t in cluster:
                        from inferencegym.evaluation.cluster import (  # lazy: imports Ray / torch (~5 s); not at start-up
                            evaluate_cluster_policy,  # lazy: imports Ray / torch (~5 s); not at start-up
                        )
                        prog.update(bar, description=escape(f"{p} on {t}"))
                        t0 = time.perf_counter()
                        cluster_rows.append(evaluate_cluster_policy(p, t, episodes=episodes, seed=seed,
                                                                    episode_windows=episode_windows,
                                                                    progress=lambda i: prog.advance(bar)))
                        partial(cluster_rows[-1], time.perf_counter() - t0)
        except endpoint_errors as exc:  # the endpoint failed during the run: exit 1
            fail(one_line(exc), code=1)
        rows = [r.to_json_dict() for r in results] + cluster_rows
        if mlflow:
            try:
                from inferencegym.tracking import (  # lazy: imports MLflow (~4.5 s); not at start-up
                    log_evaluation_run,  # lazy: imports MLflow (~4.5 s); not at start-up
                )
            except ImportError:
                err.print("[yellow]inferencegym.tracking.log_evaluation_run is not available; "
                          "skipping MLflow logging[/yellow]")
            else:
                log_evaluation_run(rows, {"episodes": episodes, "seed": seed,
                                          "policies": ",".join(policies), "tasks": ",".join(tasks)}, None)
        if as_json:
            typer.echo(json.dumps(rows))
            return
        table = Table(title=f"InferenceGym evaluation ({episodes} episodes, seeds {seed}..{seed + episodes - 1})")
        for col in ("task", "policy", "score (95% CI)", "p99 TTFT s", "p99 TBT s", "throughput tok/s",
                    "$ / 1k tok"):
            table.add_column(col, justify="left" if col in ("task", "policy") else "right")

        def fmt(x, spec):
            return "-" if x is None else format(x, spec)

        for r in rows:
            table.add_row(escape(r["task"]), escape(r["policy"]), f"{r['score_mean']:.3f} ± {r['score_ci95']:.3f}",
                          fmt(r["ttft_p99_s"], ".3f"), fmt(r["tbt_p99_s"], ".3f"),
                          fmt(r["throughput_tok_s"], ".1f"), fmt(r["cost_per_1k_tokens"], ".5f"))
        print_table(table)
