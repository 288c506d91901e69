"""``inferencegym data ...``: prepare pools, fit and generate workloads, compare traces, find spikes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from inferencegym.cli.errors import fail, one_line
from inferencegym.cli.output import print_table
from inferencegym.cli.validation import (
    MAX_BINS,
    MAX_SIM_REQUESTS,
    MIN_BIN_S,
    OptionError,
    check_bins,
    check_output_path,
)
from inferencegym.workload import load_any
from inferencegym.workload.adversarial import inject_mega_prompts, jitter
from inferencegym.workload.fit import DEFAULT_FITS, WorkloadFit, default_fit, fit_workload, generate
from inferencegym.workload.io import write_replay_csv
from inferencegym.workload.jsonio import read_json
from inferencegym.workload.limits import MAX_TRACE_TOKENS
from inferencegym.workload.pool import prepare, write_pool
from inferencegym.workload.prefix_fit import fit_prefix_specs
from inferencegym.workload.prefix_gen import (
    PREFIX_FITS,
    SCHEMA,
    PrefixWorkloadSpec,
    default_prefix_spec,
    generate_prefix_workload,
)
from inferencegym.workload.prefix_stats import format_prefix_compare, prefix_stats
from inferencegym.workload.stats import compare, detect_spikes, format_compare
from inferencegym.workload.tenants import TenantMix

data_app = typer.Typer(help="Workload traces: prepare Parquet pools, fit, generate, compare, spikes.",
                       no_args_is_help=True)


def _fail(exc: Exception) -> None:
    fail(one_line(exc, limit=600))


MAX_RATE_PER_S = 100_000.0
"""Largest ``--rate`` of ``data generate`` (the bound ``simulate --rate`` has)."""

FORMAT_HELP = "burstgpt | azure | replay | mooncake | bailian | auto (from the header / .jsonl fields)."


def _load(path: Path, fmt: str, keep_failed: bool = False, trace_block_tokens: Optional[int] = None,
          spread_tick_s: float = 0.0, seed: int = 0):
    return load_any(path, fmt, keep_failed=keep_failed, trace_block_tokens=trace_block_tokens,
                    spread_tick_s=spread_tick_s, seed=seed)


def _block_option():
    return typer.Option(None, "--trace-block-tokens",
                        help="JSONL traces: tokens per hash id [mooncake 512, bailian 16].")


def _spread_option():
    return typer.Option(0.0, "--spread-tick-s",
                        help="JSONL traces: spread each arrival over U[0, this) s (Mooncake's real "
                             "conversation trace is on a 3-s clock); seeded by --seed.")


def _prefix_rows(w, block_tokens: int):
    """prefix_stats of a workload with hash chains, else None."""
    if w.hash_ids is None:
        return None

    return prefix_stats(w, block_tokens=block_tokens)


@data_app.command("prepare")
def prepare_cmd(
    input: Path = typer.Option(..., "--input", "-i", help="CSV trace to convert."),
    output: Path = typer.Option(..., "--output", "-o", help="Parquet pool to write."),
    format: str = typer.Option("auto", "--format", "-f", "--trace-format", help=FORMAT_HELP),
    keep_failed: bool = typer.Option(False, "--keep-failed",
                                     help="Keep failed rows (0 output tokens) as failures."),
    sort: bool = typer.Option(False, "--sort", help="Sort rows by time (loads the whole file; not streamed)."),
    trace_block_tokens: Optional[int] = _block_option(),
    spread_tick_s: float = _spread_option(),
    seed: int = typer.Option(0, "--seed", help="Seed of --spread-tick-s."),
) -> None:
    """Stream a CSV trace into a typed Parquet pool (statistics in the file metadata)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    check_output_path(output, inputs=[input])
    # Written beside the output and renamed only on success: a trace that fails half-way leaves no
    # pool behind (and never a half-written one).
    partial = output.with_name(f".{output.stem}.partial{output.suffix}")
    try:
        with Progress(TextColumn("[bold]prepare[/bold] {task.description}"), BarColumn(), DownloadColumn(),
                      TimeRemainingColumn(), transient=True) as progress:
            task = progress.add_task(input.name, total=None)

            def on_progress(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            meta = prepare(input, partial, format, keep_failed=keep_failed, sort=sort,
                           on_progress=on_progress,
                           prefix_options={"trace_block_tokens": trace_block_tokens,
                                           "spread_tick_s": spread_tick_s, "seed": seed})
        if meta["source"]["rows_written"] == 0:
            raise ValueError(f"{input}: no request left to write ({meta['source']['failed_dropped']} "
                             f"failed rows dropped); pass --keep-failed to keep failed rows")
        partial.replace(output)
    except OverflowError as exc:
        partial.unlink(missing_ok=True)
        _fail(ValueError(f"{input}: timestamps out of range ({exc}); the time column must be "
                         f"seconds (or the format's unit) from the start of the trace"))
    except (ValueError, FileNotFoundError, ZeroDivisionError, IndexError) as exc:
        partial.unlink(missing_ok=True)
        _fail(exc)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    s, src = meta["stats"], meta["source"]

    def num(x, spec: str) -> str:  # one request, or equal timestamps: no rate / IAT statistics
        return "-" if x is None else f"{x:{spec}}"

    typer.echo(f"wrote {output}: {src['rows_written']} requests ({src['failed_dropped']} failed rows dropped), "
               f"span {num(s['span_s'], '.1f')} s, {num(s['rate_mean_per_s'], '.4g')} req/s, "
               f"IAT CV {num(s['iat_cv'], '.3g')}")


@data_app.command("fit")
def fit_cmd(
    input: Path = typer.Option(..., "--input", "-i", help="Trace CSV or Parquet pool."),
    output: Path = typer.Option(..., "--output", "-o", help="Fit JSON to write."),
    format: str = typer.Option("auto", "--format", "-f", "--trace-format", help=FORMAT_HELP),
    bin_s: float = typer.Option(10.0, "--bin-s", help="Bin width of the fitted rate chain (s)."),
    trace_block_tokens: Optional[int] = _block_option(),
    spread_tick_s: float = _spread_option(),
    seed: int = typer.Option(0, "--seed", help="Seed of --spread-tick-s."),
    block_tokens: int = typer.Option(16, "--block-tokens", help="Simulator KV block size for prefix statistics."),
    prefix_specs: Optional[Path] = typer.Option(
        None, "--prefix-specs", help="Traces with hash chains: also fit the prefix-sharing generators and "
                                     "write PREFIX_{shared_prefix,multiturn,agent}.json."),
) -> None:
    """Fit the default generator (Markov-modulated bins + Gaussian-copula lengths) to a trace.
    Traces with hash chains also get their prefix statistics (hit bound, reuse, popularity) in
    the fit's ``source_stats.prefix``."""
    import dataclasses

    check_output_path(output, inputs=[input])
    try:
        w = _load(input, format, trace_block_tokens=trace_block_tokens, spread_tick_s=spread_tick_s, seed=seed)
        check_bins(w.span_s, bin_s)
        fit = fit_workload(w, bin_s=bin_s, source=input.name)
        ps = _prefix_rows(w, block_tokens)
        if ps is not None:
            fit = dataclasses.replace(fit, source_stats={**fit.source_stats, "prefix": ps})
        fit.save(output)
        if prefix_specs is not None:
            if ps is None:
                raise ValueError(f"--prefix-specs needs a trace with hash chains; {input} has none")

            for kind, spec in fit_prefix_specs(w, source=input.name).items():
                dst = prefix_specs.parent / f"{prefix_specs.name}_{kind}.json"
                spec.save(dst)
                typer.echo(f"wrote {dst}: {kind}, {spec.num_prefixes} prefixes, Zipf s {spec.zipf_s}, "
                           f"{spec.mean_turns():.3g} mean turns")
    except (ValueError, FileNotFoundError) as exc:
        _fail(exc)
    a = fit.alternatives["arrival"]
    typer.echo(f"wrote {output}: {len(w)} requests, {fit.arrival['rate_per_s']:.4g} req/s, "
               f"{len(fit.arrival['class_quantiles'])} rate classes; best renewal law by KS: "
               f"{a['best_by_ks']} (KS {a[a['best_by_ks']]['ks']:.3f})")
    if ps is not None:
        p = ps["popularity"]
        typer.echo(f"prefix sharing ({block_tokens}-token blocks): infinite-cache hit bound "
                   f"{ps['hit_bound']:.4f}, reuse distance p50 {ps['reuse']['seconds']['p50']} s, "
                   f"{p['distinct_prefixes']} prefixes (Zipf s {p['zipf_s']}), mean turns "
                   f"{ps['turns']['mean_turns']}")


@data_app.command("generate")
def generate_cmd(
    fit: str = typer.Option("azure_conv", "--fit", help="Fit JSON, or a shipped fit: azure_conv | azure_code; "
                                                         "prefix-sharing: mooncake_shared_prefix | "
                                                         "mooncake_multiturn | mooncake_agent or a spec JSON."),
    duration_s: float = typer.Option(3600.0, "--duration-s", help="Length of the generated trace (s)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the numpy Generator."),
    output: Path = typer.Option(..., "--output", "-o", help=".parquet (pool) or .csv (replay format)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="Rescale the mean rate to this (req/s)."),
    jitter_s: float = typer.Option(0.0, "--jitter-s", help="Gaussian jitter sigma on arrivals (s)."),
    mega_tokens: int = typer.Option(0, "--mega-prompt-tokens", help="Inject mega-prompts of this many tokens."),
    mega_every_s: float = typer.Option(60.0, "--mega-every-s", help="Mega-prompt interval (s)."),
    mega_mode: str = typer.Option("periodic", "--mega-mode", help="periodic | random."),
    tenants: Optional[Path] = typer.Option(
        None, "--tenants", help="YAML/JSON tenant mix ({tenants: [{name, fit, rate_scale, priority, "
                                "slo_ttft_s}, ...]}); replaces --fit."),
) -> None:
    """Draw a workload from a fit. The same fit, options and seed give a byte-identical file."""
    import numpy as np

    if not (0 < duration_s <= 1e8):
        raise OptionError(f"--duration-s must be in (0, 1e8] s, got {duration_s:g}")
    _check_generate_sizes(duration_s, rate, jitter_s, mega_tokens, mega_every_s)
    check_output_path(output, inputs=[tenants, None if fit in DEFAULT_FITS else Path(fit)])
    try:
        rng = np.random.default_rng(seed)
        if tenants is not None:
            if rate is not None:
                raise ValueError("--rate does not apply to --tenants; set rate_scale per tenant in the file")
            mix = TenantMix.load(tenants)
            w = mix.generate(duration_s, rng)
            fit_source = mix.to_dict()
        elif _is_prefix_spec(fit):
            ps = default_prefix_spec(fit) if fit in PREFIX_FITS else PrefixWorkloadSpec.load(fit)
            if rate is not None:
                ps = ps.with_rate(rate)
            w = generate_prefix_workload(ps, duration_s, rng)
            fit_source = ps.source
        else:
            f = default_fit(fit) if fit in DEFAULT_FITS else WorkloadFit.load(fit)
            if rate is not None:
                f = f.with_rate(rate)
            w = generate(f, duration_s, rng)
            fit_source = f.source
        if jitter_s > 0:
            w = jitter(w, jitter_s, rng)
        if mega_tokens > 0:
            w = inject_mega_prompts(w, prompt_tokens=mega_tokens, every_s=mega_every_s, rng=rng,
                                    mode=mega_mode, duration_s=duration_s)
        source = {"generator": "inferencegym.workload.generate",
                  "fit": fit if tenants is None else str(tenants), "fit_source": fit_source,
                  "seed": seed, "duration_s": duration_s, "rate": rate, "jitter_s": jitter_s,
                  "mega_prompt_tokens": mega_tokens, "mega_every_s": mega_every_s, "mega_mode": mega_mode}
        if output.suffix.lower() == ".csv":
            if w.hash_ids is not None:
                raise ValueError("the replay CSV cannot hold hash chains; write a .parquet pool to keep them")
            write_replay_csv(w, output)
        else:
            write_pool(w, output, source=source)
    except (ValueError, FileNotFoundError) as exc:
        _fail(exc)
    typer.echo(f"wrote {output}: {len(w)} requests over {duration_s:g} s "
               f"({len(w) / duration_s if duration_s else 0:.4g} req/s)")


def _check_generate_sizes(duration_s: float, rate: float | None, jitter_s: float, mega_tokens: int,
                          mega_every_s: float) -> None:
    """Ranges of ``data generate``'s numbers, before anything is drawn (a typo such as
    ``--rate 1e9`` would otherwise allocate until the machine runs out of memory)."""
    if rate is not None:
        if not 0 < rate <= MAX_RATE_PER_S:
            raise OptionError(f"--rate must be in (0, {MAX_RATE_PER_S:g}] req/s, got {rate:g}")
        if rate * duration_s > MAX_SIM_REQUESTS:
            raise OptionError(f"--rate x --duration-s = {rate * duration_s:.3g} requests; at most "
                              f"{MAX_SIM_REQUESTS:,} are generated: lower --rate or --duration-s")
    if not 0 <= jitter_s <= duration_s:
        raise OptionError(f"--jitter-s must be in [0, --duration-s = {duration_s:g}] s, got {jitter_s:g}")
    if not 0 <= mega_tokens <= MAX_TRACE_TOKENS:
        raise OptionError(f"--mega-prompt-tokens must be in [0, {MAX_TRACE_TOKENS:,}], got {mega_tokens}")
    if mega_tokens and not (mega_every_s >= MIN_BIN_S and duration_s / mega_every_s <= MAX_SIM_REQUESTS):
        raise OptionError(f"--mega-every-s must be >= {MIN_BIN_S:g} s and leave at most "
                          f"{MAX_SIM_REQUESTS:,} mega-prompts over --duration-s, got {mega_every_s:g}")


def _is_prefix_spec(fit: str) -> bool:
    if fit in PREFIX_FITS:
        return True
    p = Path(fit)
    if p.suffix != ".json" or not p.is_file():
        return False
    try:
        d = read_json(p, "fit")
    except (OSError, ValueError):
        return False  # WorkloadFit.load then says what is wrong with the file
    return isinstance(d, dict) and d.get("schema") == SCHEMA


@data_app.command("compare")
def compare_cmd(
    a: Path = typer.Argument(..., help="First trace (CSV) or pool (Parquet)."),
    b: Path = typer.Argument(..., help="Second trace (CSV) or pool (Parquet)."),
    format_a: str = typer.Option("auto", "--format-a", help="Format of A if not a pool: " + FORMAT_HELP),
    format_b: str = typer.Option("auto", "--format-b", help="Format of B if not a pool."),
    trace_format: Optional[str] = typer.Option(None, "--trace-format",
                                               help="Format of both (where --format-a/-b are auto)."),
    trace_block_tokens: Optional[int] = _block_option(),
    spread_tick_s: float = _spread_option(),
    seed: int = typer.Option(0, "--seed", help="Seed of --spread-tick-s."),
    block_tokens: int = typer.Option(16, "--block-tokens", help="Simulator KV block size for prefix statistics."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Rate, burstiness, length percentiles, correlation and KS tests of two traces side by side;
    prefix statistics (infinite-cache hit bound, reuse distance, prefix popularity, turns) when
    either has hash chains."""
    if trace_format is not None:
        format_a = trace_format if format_a == "auto" else format_a
        format_b = trace_format if format_b == "auto" else format_b
    opts = dict(trace_block_tokens=trace_block_tokens, spread_tick_s=spread_tick_s, seed=seed)
    try:
        wa, wb = _load(a, format_a, **opts), _load(b, format_b, **opts)
        r = compare(wa, wb)
        pa_, pb_ = _prefix_rows(wa, block_tokens), _prefix_rows(wb, block_tokens)
        if pa_ is not None or pb_ is not None:
            r["prefix"] = {"a": pa_, "b": pb_}
    except (ValueError, FileNotFoundError) as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(r, indent=1, default=float))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title="trace comparison")
    from rich.markup import escape

    for col in ("metric", f"A: {escape(a.name)}", f"B: {escape(b.name)}", "B vs A"):
        t.add_column(col)
    for row in format_compare(r):
        t.add_row(*row)
    if "prefix" in r:
        for row in format_prefix_compare(r["prefix"]["a"], r["prefix"]["b"]):
            t.add_row(*row)
    print_table(t)


@data_app.command("spikes")
def spikes_cmd(
    input: Path = typer.Argument(..., help="Trace (CSV) or pool (Parquet)."),
    format: str = typer.Option("auto", "--format", "-f", help="Format if CSV."),
    bin_s: float = typer.Option(10.0, "--bin-s", help="Bin width (s)."),
    threshold: float = typer.Option(2.0, "--threshold", help="A bin spikes above threshold x mean count."),
    local_window_s: Optional[float] = typer.Option(
        None, "--local-window-s",
        help="Compare with a centred rolling mean of this width instead of the global mean."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Spike windows of a trace: start, end, peak rate, requests."""
    try:
        w = _load(input, format)
        check_bins(w.span_s, bin_s)
        if local_window_s is not None and not bin_s <= local_window_s <= bin_s * MAX_BINS:
            raise OptionError(f"--local-window-s must be in [--bin-s = {bin_s:g}, {bin_s * MAX_BINS:g}] s, "
                              f"got {local_window_s:g}")
        spikes = detect_spikes(w, bin_s=bin_s, threshold=threshold,
                               local_window_s=local_window_s)
    except (ValueError, FileNotFoundError) as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps([s.to_dict() for s in spikes], indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{len(spikes)} spike windows (> {threshold:g} x mean per {bin_s:g} s)")
    for col in ("start_s", "end_s", "peak req/s", "requests"):
        t.add_column(col, justify="right")
    for s in spikes:
        t.add_row(f"{s.start_s:.1f}", f"{s.end_s:.1f}", f"{s.peak_rate_per_s:.2f}", str(s.requests))
    print_table(t)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
