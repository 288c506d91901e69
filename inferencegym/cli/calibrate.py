"""``inferencegym calibrate`` (refit the execution-time model) and ``inferencegym presets``."""

from __future__ import annotations

from pathlib import Path

import typer

from inferencegym.cli.output import print_table
from inferencegym.sim import execution_params
from inferencegym.sim import presets as P


def _calibrate_profile(profile: Path, gpu: str | None, out: Path | None, fp16_tflops, mem_gbytes_per_s,
                       memory_gb, base_gpu: str) -> None:
    """``calibrate --profile``: fit one GPU preset on a GPU profile file and write it to ``out``."""
    import json

    from rich.console import Console
    from rich.table import Table

    from inferencegym.sim.calibration.custom import (  # lazy: imports scipy.optimize and pandas (~1.7 s); not at start-up
        fit_custom_gpu,
        gpu_preset,
    )

    if gpu is None or out is None:
        raise typer.BadParameter("--profile needs --gpu NAME (the preset to fit) and --out FILE "
                                 "(where to write the GPU calibration)")
    if not profile.is_file():
        raise typer.BadParameter(f"profile file {profile} does not exist (write it with benchmarks/gpu_profile.py)")
    try:
        preset = gpu_preset(gpu, fp16_tflops=fp16_tflops, mem_gbytes_per_s=mem_gbytes_per_s,
                            memory_gb=memory_gb, base_gpu=base_gpu)
        cal = fit_custom_gpu(profile, preset, base_gpu=base_gpu)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n")
    console = Console()
    table = Table(title=f"{gpu}: fitted MAPE per op family, %")
    for c in ("family", "MAPE", "rows"):
        table.add_column(c)
    for fam, e in cal["errors"]["ops"].items():
        table.add_row(fam, f"{e['mape_pct']:.1f}", str(e["rows"]))
    for fam, v in cal["errors"]["whole_model"].items():
        table.add_row(fam, f"{v:.1f}", "")
    print_table(table, console=console)
    console.print(f"wrote {out}; use it with inferencegym.sim.calibration.custom.load_gpu_calibration")


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    def calibrate(
        reference_dir: Path | None = typer.Option(
            None, help="Reference data folder (default: $INFERENCEGYM_REFERENCE_DIR or ../shared/reference)."),
        out: Path | None = typer.Option(
            None, help="Where to write the fitted JSON (default: the package's data/calibration.json)."),
        report: bool = typer.Option(True, help="Print the error summary of the new fit."),
        profile: Path | None = typer.Option(
            None, help="Fit one GPU on your measurements instead (benchmarks/gpu_profile.py output); "
                       "needs --gpu and --out."),
        gpu: str | None = typer.Option(None, help="With --profile: the GPU's preset name (new or existing)."),
        fp16_tflops: float | None = typer.Option(None, help="With --profile, new GPU: dense FP16 TF/s."),
        mem_gbytes_per_s: float | None = typer.Option(None, help="With --profile, new GPU: memory GB/s."),
        memory_gb: float | None = typer.Option(None, help="With --profile, new GPU: memory, GB."),
        base_gpu: str = typer.Option("h100-80gb", help="With --profile: calibrated GPU of the same family "
                                                        "(network, fused elementwise kernels)."),
    ) -> None:
        """Refit the execution-time model on the reference data, or (--profile) fit one GPU preset."""
        import json

        if profile is not None:
            _calibrate_profile(profile, gpu, out, fp16_tflops, mem_gbytes_per_s, memory_gb, base_gpu)
            return

        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        from inferencegym.sim.calibration import (
            reference as R,  # lazy: imports scipy.optimize and pandas (~1.7 s); not at start-up
        )
        from inferencegym.sim.calibration.fit import (  # lazy: imports scipy.optimize and pandas (~1.7 s); not at start-up
            default_output,
            fit_all,
        )

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

            from inferencegym.sim.calibration import (
                evaluate as E,  # lazy: imports scipy.optimize and pandas (~1.7 s); not at start-up
            )

            execution_params.load_calibration.cache_clear()
            execution_params._params_for.cache_clear()
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
            print_table(table, console=console)

    @app.command("presets")
    def presets() -> None:
        """List the GPU, model and quantization presets of the execution-time model."""
        from rich.console import Console
        from rich.table import Table


        console = Console()
        t = Table(title="GPUs")
        for c in ("name", "FP16 TF/s", "INT8 TOP/s", "HBM GB/s", "memory GB", "$/GPU-h", "calibrated"):
            t.add_column(c, no_wrap=c in ("name", "draft"))
        for n in P.list_gpus():
            g = P.get_gpu(n)
            t.add_row(n, f"{g.fp16_tflops:g}", f"{g.int8_tops:g}", f"{g.mem_gbytes_per_s:g}",
                      f"{g.memory_gbytes:g}", f"{g.gpu_hour_usd:g}", str(g.calibrated))
        print_table(t, console=console)
        t = Table(title="models")
        for c in ("name", "params (B)", "layers", "hidden", "heads/kv", "ffn", "vocab", "draft"):
            t.add_column(c, no_wrap=c in ("name", "draft"))
        for n in P.list_models():
            m = P.get_model(n)
            t.add_row(n, f"{m.num_params / 1e9:.2f}", str(m.num_layers), str(m.hidden_size),
                      f"{m.num_heads}/{m.num_kv_heads}", str(m.ffn_size), str(m.vocab_size),
                      m.draft_model or "-")
        print_table(t, console=console)
        t = Table(title="quantization tiers")
        for c in ("name", "bytes/param", "quality_delta", "description"):
            t.add_column(c, no_wrap=c in ("name", "draft"))
        for n in P.list_quantizations():
            q = P.get_quantization(n)
            t.add_row(n, f"{q.weight_bytes_per_param:.3f}", f"{q.quality_delta:g}", q.description)
        print_table(t, console=console)
