"""Control-plane episodes from ``inferencegym simulate`` and rows for ``inferencegym evaluate``.

``simulate --control-task cluster_autoscaling --autoscaler wva --day 12`` runs one episode;
``evaluate --task cluster_autoscaling --policy hpa,kpa,wva`` evaluates over held-out days and seeds.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from inferencegym.cli.output import json_safe
from inferencegym.tasks.control import CONTROL_TASKS


def is_control_task(task_id: str) -> bool:
    return task_id in CONTROL_TASKS


def simulate_control(task: str, autoscaler: Optional[str], admission: Optional[str], day: Optional[int],
                     seed: int, load_windows: Optional[str], failures: bool, as_json: bool) -> None:
    from inferencegym.evaluation.control import run_episode

    if task not in CONTROL_TASKS:
        raise typer.BadParameter(f"unknown control task {task!r}; valid: {', '.join(CONTROL_TASKS)}")
    spec = "+".join(p for p in (autoscaler, admission) if p) or "admit_all"
    try:
        from inferencegym.tasks.control import DEFAULT_WINDOWS, day_split, load_windows as lw

        days = day_split(len(lw(str(load_windows or DEFAULT_WINDOWS))))
        d = days["test"][0] if day is None else day
        out = run_episode(task, spec, day=d, seed=seed, load_windows_path=load_windows, failures=failures)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(json_safe(out)))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"inferencegym simulate: {task}, {spec}, day {out['day']}, seed {seed}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k in ("score", "gpu_hours", "slo_attainment", "arrivals", "rejected", "expired", "retried", "crashes",
              "episode_s", "cpu_s"):
        v = out[k]
        t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    for name, a in out["tier_slo_attainment"].items():
        t.add_row(escape(f"[{name}] SLO / p90 TTFT s"), f"{a:.3f} / {out['tier_ttft_p90_s'][name]:.3f}")
    Console().print(t)


def evaluate_control_rows(policies: list[str], tasks: list[str], *, episodes: int, seed: int, split: str,
                          load_windows: Optional[str], failures: bool, episode_windows: Optional[int] = None,
                          progress=None) -> list[dict]:
    from inferencegym.evaluation.control import evaluate_control, parse_spec
    from inferencegym.tasks.control import get_control_task

    try:
        for t in tasks:
            for p in policies:
                parse_spec(p, get_control_task(t))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    rows = []
    for t in tasks:
        for p in policies:
            try:
                rows.append(json_safe(evaluate_control(p, t, episodes=episodes, seed=seed, split=split,
                                                    load_windows_path=load_windows, failures=failures,
                                                    episode_windows=episode_windows, progress=progress)))
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from None
    return rows


def print_control_rows(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="InferenceGym control-plane evaluation")
    for col in ("task", "policy", "episodes", "score (95% CI)", "GPU-hours", "SLO attainment", "tier SLO",
                "tier p90 TTFT s"):
        t.add_column(col, justify="left" if col in ("task", "policy") else "right")
    for r in rows:
        tiers = " ".join(f"{k[:4]} {v:.3f}" for k, v in r["tier_slo_attainment"].items() if v is not None)
        ttft = " ".join(f"{k[:4]} {v:.2f}" for k, v in r["tier_ttft_p90_s"].items() if v is not None)
        t.add_row(r["task"], r["policy"], str(r["episodes"]), f"{r['score_mean']:.3f} ± {r['score_ci95']:.3f}",
                  f"{r['gpu_hours']:.1f}", f"{r['slo_attainment']:.3f}", tiers, ttft)
    Console().print(t)
