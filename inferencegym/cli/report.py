"""``inferencegym report``: Markdown/HTML report with learning curves and policy-vs-baselines plots."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from inferencegym.cli.errors import fail, one_line


def report_command(
    records: Optional[Path] = typer.Option(None, "--records", help="run-record JSON file or directory "
                                           "(benchmarks/results/training by default)"),
    trial: Optional[list[Path]] = typer.Option(None, "--trial", help="a Tune trial dir (learning curve only); repeatable"),
    out: Path = typer.Option(Path("reports/training"), "--out", help="output directory"),
    title: str = typer.Option("InferenceGym training report", "--title"),
    mlflow: bool = typer.Option(False, "--mlflow/--no-mlflow", help="attach the report to an MLflow run"),
) -> None:
    """Write report.md / report.html (+ PNG plots) from training run records and/or Tune trials."""
    from rich.console import Console

    from inferencegym.rl.report import (  # lazy: imports Ray / torch (~5 s); not at start-up
        load_records,
        write_report,
    )

    console = Console()
    recs = []
    if records is None and not trial:
        records = Path("benchmarks/results/training")
    if records is not None:
        try:
            recs.extend(load_records(records))
        except (FileNotFoundError, ValueError) as exc:
            fail(one_line(exc))
    for t in trial or ():
        if not (t / "result.json").is_file():
            fail(f"{t} is not a Tune trial directory (no result.json)")
        recs.append({"task": t.name, "name": t.name, "progress_csv": str(t / "progress.csv")})
    files = write_report(recs, out, title=title)
    console.print(f"wrote {files['report.md']} and {files['report.html']} ({len(files) - 2} plots)")
    if mlflow:
        from inferencegym.tracking import log_evaluation_run  # lazy: imports MLflow (~4.5 s); not at start-up

        rows = [r for rec in recs for r in rec.get("rows", [])]
        run_id = log_evaluation_run(rows or [{"policy": "-", "task": "-"}], params={"records": str(records)},
                                    artifacts=list(files.values()), experiment="reports", run_name=title)
        console.print(f"mlflow run: {run_id}")


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
