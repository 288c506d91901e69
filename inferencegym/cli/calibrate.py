"""``inferencegym calibrate`` (refit the execution-time model) and ``inferencegym presets``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    def calibrate(
        reference_dir: Optional[Path] = typer.Option(
            None, help="Reference data folder (default: $INFERENCEGYM_REFERENCE_DIR or ../shared/reference)."),
        out: Optional[Path] = typer.Option(
            None, help="Where to write the fitted JSON (default: the package's data/calibration.json)."),
        report: bool = typer.Option(True, help="Print the error summary of the new fit."),
    ) -> None:
        """Refit the execution-time model on the Vidur and SplitwiseSim reference data."""
        import json

        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from inferencegym.sim.calibration import reference as R
        from inferencegym.sim.calibration.fit import default_output, fit_all

        console = Console()
        ref = reference_dir or R.default_reference_dir()
        if not ref.is_dir():
            raise typer.BadParameter(f"reference folder {ref} does not exist; pass --reference-dir "
                                     f"or set INFERENCEGYM_REFERENCE_DIR")
        target = out or default_output()
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=console) as prog:
            task = prog.add_task("fitting", total=None)
            cal = fit_all(ref, progress=lambda m: prog.update(task, description=f"fitting {m}"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n")
        console.print(f"wrote {target}")
        if report and out is None:
            from rich.table import Table

            from inferencegym.sim import execution
            from inferencegym.sim.calibration import evaluate as E

            execution.load_calibration.cache_clear()
            execution._params_for.cache_clear()
            table = Table(title="calibration error (MAPE / max APE, %)")
            for c in ("data", "held out", "MAPE", "max", "rows"):
                table.add_column(c)
            rows = [("Vidur iteration reference", E.iteration_errors(ref))]
            sw = E.splitwise_errors(ref)
            rows += [(f"SplitwiseSim {k}", sw[sw["kind"] == k]) for k in ("prefill", "decode")]
            for name, d in rows:
                for held, g in d.groupby("heldout"):
                    table.add_row(name, str(bool(held)), f"{g['ape'].mean():.1f}",
                                  f"{g['ape'].max():.1f}", str(len(g)))
            console.print(table)

    @app.command("presets")
    def presets() -> None:
        """List the GPU, model and quantization presets of the execution-time model."""
        from rich.console import Console
        from rich.table import Table

        from inferencegym.sim import presets as P

        console = Console()
        t = Table(title="GPUs")
        for c in ("name", "FP16 TF/s", "INT8 TOP/s", "HBM GB/s", "memory GB", "$/GPU-h", "calibrated"):
            t.add_column(c, no_wrap=c in ("name", "draft"))
        for n in P.list_gpus():
            g = P.get_gpu(n)
            t.add_row(n, f"{g.fp16_tflops:g}", f"{g.int8_tops:g}", f"{g.mem_gbytes_per_s:g}",
                      f"{g.memory_gbytes:g}", f"{g.gpu_hour_usd:g}", str(g.calibrated))
        console.print(t)
        t = Table(title="models")
        for c in ("name", "params (B)", "layers", "hidden", "heads/kv", "ffn", "vocab", "draft"):
            t.add_column(c, no_wrap=c in ("name", "draft"))
        for n in P.list_models():
            m = P.get_model(n)
            t.add_row(n, f"{m.num_params / 1e9:.2f}", str(m.num_layers), str(m.hidden_size),
                      f"{m.num_heads}/{m.num_kv_heads}", str(m.ffn_size), str(m.vocab_size),
                      m.draft_model or "-")
        console.print(t)
        t = Table(title="quantization tiers")
        for c in ("name", "bytes/param", "quality_delta", "description"):
            t.add_column(c, no_wrap=c in ("name", "draft"))
        for n in P.list_quantizations():
            q = P.get_quantization(n)
            t.add_row(n, f"{q.weight_bytes_per_param:.3f}", f"{q.quality_delta:g}", q.description)
        console.print(t)
