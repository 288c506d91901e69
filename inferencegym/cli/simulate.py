"""``inferencegym simulate``: run one cluster scenario and print a summary (or one JSON object).

Flags are stable (scripts outside the project rely on them and on the JSON keys). A YAML file given
with ``--config`` may set any flag (underscored names); flags given on the command line win.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Optional

import typer

from inferencegym.cli.output import json_safe, print_table
from inferencegym.cli.validation import check_output_path, read_yaml_mapping, validate_simulate_options
from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request, TenantSpec
from inferencegym.sim.config import DEFAULT_KNOBS
from inferencegym.workload import load_trace

DEFAULTS: dict[str, Any] = {  # the replica knobs' defaults are the one vocabulary's (sim.config.DEFAULT_KNOBS)
    "model": "llama-2-7b", "gpu": "a100-80gb", "tensor_parallel": 1, "replicas": 1,
    "router": "round_robin", "scheduler": DEFAULT_KNOBS.scheduler, "batch_cap": DEFAULT_KNOBS.batch_cap,
    "chunk_size": 512, "kv_budget_fraction": DEFAULT_KNOBS.kv_budget_fraction, "rate": 2.0,
    "duration_s": None, "prompt_tokens": 512, "output_tokens": 128, "trace": None, "trace_format": "auto",
    "seed": 0,
    "speculation_depth": DEFAULT_KNOBS.speculation_depth, "spec_acceptance": 0.7, "draft_model": "default",
    "spec_workload": None,
    "quantization": DEFAULT_KNOBS.quantization, "disaggregate": False,
    "prefill_replicas": 1, "priority_routing": False, "tenants": None, "gpu_hour_usd": None,
    "results_parquet": None, "prefix_caching": True, "engine_profile": "vllm-v1",
    "expert_parallel": 1, "kv_cache_dtype": "auto", "cpu_kv_gb": 0.0, "pipeline_parallel": 1,
    "cpu_kv_connector": "offload",
}
POISSON_DEFAULT_DURATION_S = 300.0


def load_tenants(path: str | Path):
    """Tenant classes from YAML: a list (or ``{tenants: [...]}``) of mappings with TenantSpec fields
    (name, priority, ttft_slo_s, tbt_slo_s, spec_acceptance) plus an optional ``share`` (fraction of
    generated requests; default equal shares). Returns (tuple of TenantSpec, list of shares)."""
    from inferencegym.safe_yaml import read_yaml


    p = Path(path)
    if not p.is_file():
        raise typer.BadParameter(f"tenants file not found: {p}")
    data = read_yaml(p, "tenants file")
    if isinstance(data, dict) and "tenants" in data:
        data = data["tenants"]
    if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
        raise typer.BadParameter(f"{p}: expected a non-empty list of tenant mappings "
                                 f"(name, priority, ttft_slo_s, tbt_slo_s, spec_acceptance, share)")
    specs, shares = [], []
    fields = set(TenantSpec.__dataclass_fields__)
    for i, d in enumerate(data):
        d = dict(d)
        share = float(d.pop("share", 1.0))
        unknown = set(d) - fields
        if unknown:
            raise typer.BadParameter(f"{p}: tenant {i} has unknown keys {sorted(unknown)}; "
                                     f"valid: {sorted(fields | {'share'})}")
        try:
            specs.append(TenantSpec(**d))
        except (TypeError, ValueError) as e:
            raise typer.BadParameter(f"{p}: tenant {i}: {e}") from None
        if share < 0:
            raise typer.BadParameter(f"{p}: tenant {i}: share must be >= 0, got {share}")
        shares.append(share)
    if sum(shares) <= 0:
        raise typer.BadParameter(f"{p}: tenant shares sum to 0")
    return tuple(specs), shares


def build_requests(o: dict, tenants, shares):
    """Requests from a trace (``--trace``) or Poisson arrivals with fixed lengths (seeded)."""
    import numpy as np


    rng = np.random.default_rng(o["seed"])
    if o["trace"]:
        wl = load_trace(o["trace"], format=o["trace_format"])
        if o["duration_s"] is not None:
            wl = wl.window(0.0, float(o["duration_s"]))
        reqs = wl.to_requests()
        nt = len(tenants)
        for r in reqs:
            if r.tenant >= nt:
                raise typer.BadParameter(f"trace request {r.req_id} has tenant {r.tenant} but only {nt} "
                                         f"tenant(s) are defined (use --tenants)")
            if tenants[r.tenant].priority and not r.priority:
                r.priority = 1
        return reqs
    rate, dur = float(o["rate"]), float(o["duration_s"] or POISSON_DEFAULT_DURATION_S)
    if rate <= 0 or dur <= 0:
        raise typer.BadParameter(f"--rate and --duration-s must be > 0, got {rate}, {dur}")
    if o["prompt_tokens"] < 1 or o["output_tokens"] < 1:
        raise typer.BadParameter("--prompt-tokens and --output-tokens must be >= 1")
    gaps = rng.exponential(1.0 / rate, size=int(rate * dur * 1.5) + 20)
    t = np.cumsum(gaps)
    while t[-1] < dur:  # rare: extend
        t = np.concatenate([t, t[-1] + np.cumsum(rng.exponential(1.0 / rate, size=len(t)))])
    t = t[t < dur]
    p = np.asarray(shares, float) / sum(shares)
    ten = rng.choice(len(tenants), size=len(t), p=p) if len(tenants) > 1 else np.zeros(len(t), int)
    return [Request(req_id=i, arrival_s=float(t[i]), prompt_tokens=int(o["prompt_tokens"]),
                    output_tokens=int(o["output_tokens"]), tenant=int(ten[i]),
                    priority=int(tenants[int(ten[i])].priority)) for i in range(len(t))]


def spec_alpha(o: dict) -> float:
    """The draft acceptance ``alpha``: ``spec_acceptance``, or the published figure of the proposer
    on ``spec_workload`` (``sim.spec_acceptance``) when that is given. ValueError for both at once
    or an unknown pair."""
    if o.get("spec_workload") is None:
        return float(o["spec_acceptance"])
    from inferencegym.sim.spec_acceptance import acceptance_alpha

    if o.get("_spec_acceptance_given"):
        raise ValueError("give either --spec-acceptance or --spec-workload, not both")
    dm = str(o["draft_model"])
    proposer = dm if dm in ("ngram", "eagle") else "draft"
    return acceptance_alpha(proposer, str(o["spec_workload"]))


def run_scenario(o: dict, progress: bool = False) -> tuple[dict, Any]:
    """Run the scenario described by the resolved options; returns (summary dict, cluster)."""
    import numpy as np


    if o["tenants"]:
        tenants, shares = load_tenants(o["tenants"])
    else:
        tenants, shares = (TenantSpec(),), [1.0]
    try:
        rc = ReplicaConfig(model=o["model"], gpu=o["gpu"], tensor_parallel=int(o["tensor_parallel"]),
                           quantization=o["quantization"], scheduler=o["scheduler"],
                           engine_profile=o["engine_profile"],
                           batch_cap=int(o["batch_cap"]), chunk_size=int(o["chunk_size"]),
                           kv_budget_fraction=float(o["kv_budget_fraction"]),
                           speculation_depth=int(o["speculation_depth"]),
                           spec_acceptance=spec_alpha(o),
                           draft_model=str(o["draft_model"]),
                           prefix_caching=bool(o["prefix_caching"]),
                           expert_parallel=int(o["expert_parallel"]),
                           pipeline_parallel=int(o["pipeline_parallel"]),
                           kv_cache_dtype=str(o["kv_cache_dtype"]), cpu_kv_gb=float(o["cpu_kv_gb"]),
                           cpu_kv_connector=str(o["cpu_kv_connector"]))
        cc = ClusterConfig(replica=rc, num_replicas=int(o["replicas"]), router=o["router"], tenants=tenants,
                           priority_routing=bool(o["priority_routing"]), disaggregate=bool(o["disaggregate"]),
                           prefill_replicas=int(o["prefill_replicas"]), gpu_hour_usd=o["gpu_hour_usd"])
        if cc.router == "external":
            raise ValueError("router 'external' needs an agent; use it through inferencegym.envs")
        reqs = build_requests(o, tenants, shares)
        cluster = Cluster(cc, rng=np.random.default_rng(o["seed"]))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    t0 = time.perf_counter()
    cluster.submit(reqs)
    horizon = max((r.arrival_s for r in reqs), default=0.0)
    if progress and reqs:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("simulating"), BarColumn(), TextColumn("{task.fields[info]}"),
                      TimeElapsedColumn(), transient=True) as bar:
            task = bar.add_task("sim", total=len(reqs), info="")
            steps = 100
            for i in range(1, steps + 1):
                cluster.run_until(horizon * i / steps)
                bar.update(task, completed=cluster.n_completed + cluster.n_rejected,
                           info=f"t={cluster.now_s:.0f}s")
            cluster.drain()
            bar.update(task, completed=len(reqs))
    else:
        cluster.drain()
    wall = time.perf_counter() - t0
    ws = cluster.run_stats()
    # the totals of the per-request table (``cluster.results()``), summed without building it
    n_rejected = n_preempt = n_cached = 0
    for r in reqs:
        if r.rejected_reason is not None:
            n_rejected += 1
        n_preempt += r.preemptions
        n_cached += r.cached_tokens
    summary = {
        "requests_total": len(reqs),
        "requests_completed": len(reqs) - n_rejected,
        "requests_rejected": n_rejected,
        "preemptions": n_preempt,
        "throughput_tok_s": ws.throughput_tok_s,
        "throughput_req_s": ws.throughput_req_s,
        "goodput_req_s": ws.goodput_req_s,
        "slo_attainment": ws.slo_attainment,
        "ttft_s": ws.ttft_s, "tbt_s": ws.tbt_s, "tpot_s": ws.tpot_s, "e2e_s": ws.e2e_s,
        "queueing_delay_s": ws.queueing_delay_s,
        "kv_occupancy_mean": ws.kv_occupancy_mean,
        "kv_occupancy_max": ws.kv_occupancy_max,
        "quality_delta": ws.quality_delta,
        "cost_usd": ws.cost_usd,
        "cost_per_1k_tokens": ws.cost_per_1k_tokens,
        "spec_acceptance_rate": ws.spec_acceptance_rate,
        "prefix_hit_rate": ws.prefix_hit_rate,
        "prefix_hit_rate_by_tier": cluster.prefix_hit_rate_by_tier(),
        "cached_tokens": n_cached,
        "prefix_cache_occupancy": ws.prefix_cache_occupancy,
        "tenants": {n: {"ttft_s": t.ttft_s, "tbt_s": t.tbt_s, "tpot_s": t.tpot_s, "e2e_s": t.e2e_s,
                        "completions": t.completions,
                        "slo_attainment": t.slo_attainment} for n, t in ws.tenants.items()},
        "sim_s": cluster.now_s,
        "gpus": sum(r.model.gpu_count for r in cluster.replicas),
        "wall_s": wall,
        "config": cc.to_dict(),
        "calibration_error": cluster.base_model.calibration_error(),
    }
    if o["results_parquet"]:
        cluster.write_parquet(o["results_parquet"])
    return summary, cluster


def _print_table(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    def f(x, unit=""):
        return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else (
            f"{x:.4g}{unit}" if isinstance(x, float) else f"{x}{unit}")

    t = Table(title="inferencegym simulate", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k in ("requests_total", "requests_completed", "requests_rejected", "preemptions"):
        t.add_row(k, f(s[k]))
    for k in ("ttft_s", "tbt_s", "tpot_s", "e2e_s", "queueing_delay_s"):
        d = s[k]
        t.add_row(k + " p50/p90/p99", " / ".join(f(d[q]) for q in ("p50", "p90", "p99")))
    for k in ("throughput_tok_s", "throughput_req_s", "goodput_req_s", "slo_attainment", "kv_occupancy_mean",
              "kv_occupancy_max", "cost_per_1k_tokens", "quality_delta", "spec_acceptance_rate",
              "prefix_hit_rate", "cached_tokens", "sim_s",
              "gpus", "wall_s"):
        t.add_row(k, f(s[k]))
    if len(s["tenants"]) > 1:
        for n, d in s["tenants"].items():
            t.add_row(f"[{n}] ttft p99 / tbt p99 / SLO",
                      f"{f(d['ttft_s']['p99'])} / {f(d['tbt_s']['p99'])} / {f(d['slo_attainment'])}")
    print_table(t)


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        model: Optional[str] = typer.Option(None, help="model preset [llama-2-7b]"),
        gpu: Optional[str] = typer.Option(None, help="GPU preset [a100-80gb]"),
        tensor_parallel: Optional[int] = typer.Option(None, help="GPUs per replica [1]"),
        replicas: Optional[int] = typer.Option(None, help="number of replicas [1]"),
        router: Optional[str] = typer.Option(None, help="round_robin|random|least_outstanding_requests|"
                                                         "least_kv_load|power_of_two_choices|clairvoyant|"
                                                         "llmd_precise|llmd_approx|sglang_cache_aware|dynamo_kv"),
        scheduler: Optional[str] = typer.Option(None, help="vllm|sarathi|static [vllm]"),
        batch_cap: Optional[int] = typer.Option(None, help=f"max running sequences [{DEFAULT_KNOBS.batch_cap}]"),
        chunk_size: Optional[int] = typer.Option(None, help="sarathi tokens per iteration [512]"),
        kv_budget_fraction: Optional[float] = typer.Option(
            None, help=f"fraction of free memory for KV [{DEFAULT_KNOBS.kv_budget_fraction}]"),
        rate: Optional[float] = typer.Option(None, help="Poisson arrivals per second [2.0]"),
        duration_s: Optional[float] = typer.Option(None, help="arrival horizon, s [300; whole trace]"),
        prompt_tokens: Optional[int] = typer.Option(None, help="prompt length of generated requests [512]"),
        output_tokens: Optional[int] = typer.Option(None, help="output length of generated requests [128]"),
        trace: Optional[Path] = typer.Option(None, help="replay a trace CSV instead of Poisson arrivals"),
        trace_format: Optional[str] = typer.Option(None, help="replay|azure|burstgpt|mooncake|bailian|auto [auto]"),
        seed: Optional[int] = typer.Option(None, help="seed of arrivals and simulator randomness [0]"),
        speculation_depth: Optional[int] = typer.Option(None, help="draft tokens per step, 0..8 [0]"),
        spec_acceptance: Optional[float] = typer.Option(None, help="draft acceptance rate alpha [0.7]"),
        draft_model: Optional[str] = typer.Option(None, help="speculative proposer: default|ngram|eagle|"
                                                             "a draft model preset [default]"),
        spec_workload: Optional[str] = typer.Option(None, help="take alpha from the published acceptance of "
                                                               "the proposer on this dataset (e.g. sharegpt, "
                                                               "cnn_dailymail, mt_bench)"),
        quantization: Optional[str] = typer.Option(None, help="fp16|int8|int4|fp8|mxfp4 [fp16]"),
        expert_parallel: Optional[int] = typer.Option(None, help="expert-parallel degree of a MoE model "
                                                                 "(DP attention ranks) [1]"),
        pipeline_parallel: Optional[int] = typer.Option(None, help="pipeline stages per replica 1|2|4|8 "
                                                                   "(layers split, micro-batched) [1]"),
        kv_cache_dtype: Optional[str] = typer.Option(None, help="KV-cache element type auto|fp8 [auto]"),
        cpu_kv_gb: Optional[float] = typer.Option(None, help="host memory per replica for the CPU KV "
                                                             "tier, GB [0: none]"),
        cpu_kv_connector: Optional[str] = typer.Option(None, help="CPU tier's store/reload: offload (vLLM's "
                                                                  "CPU offloading) | lmcache [offload]"),
        engine_profile: Optional[str] = typer.Option(None, help="engine overhead: vllm-v1|vllm-v0|vllm-2023|"
                                                                "kernel-only [vllm-v1]"),
        disaggregate: Optional[bool] = typer.Option(None, "--disaggregate/--colocate",
                                                    help="split prefill and decode instances"),
        prefill_replicas: Optional[int] = typer.Option(None, help="prefill instances when disaggregated [1]"),
        priority_routing: Optional[bool] = typer.Option(None, "--priority-routing/--no-priority-routing",
                                                        help="priority tenants jump queues, may preempt"),
        tenants: Optional[Path] = typer.Option(None, help="tenants YAML (name, priority, SLOs, share)"),
        gpu_hour_usd: Optional[float] = typer.Option(None, help="override the preset GPU-hour price"),
        config: Optional[Path] = typer.Option(None, help="YAML with any of these options (underscored)"),
        results_parquet: Optional[Path] = typer.Option(None, help="write per-request results here"),
        prefix_caching: Optional[bool] = typer.Option(None, "--prefix-caching/--no-prefix-caching",
                                                      help="automatic prefix caching on the replicas [on]"),
        json_out: bool = typer.Option(False, "--json", help="print one JSON object instead of a table"),
        control_task: Optional[str] = typer.Option(None, help="run one episode of a control-plane task "
                                                              "(cluster_autoscaling|cluster_admission)"),
        autoscaler: Optional[str] = typer.Option(None, help="control task: hpa|kpa|wva|dynamo_planner|"
                                                            "scheduled|hindsight|static"),
        admission: Optional[str] = typer.Option(None, help="control task: admit_all|gaie_shed|token_bucket"),
        day: Optional[int] = typer.Option(None, min=0, help="control task: day of the windows file "
                                                            "[first test day]"),
        load_windows: Optional[Path] = typer.Option(None, help="control task: ServeGen *__windows.parquet "
                                                               "file [language m-large]"),
        failures: bool = typer.Option(False, "--failures/--no-failures",
                                      help="control task: replica crashes and stragglers"),
    ) -> None:
        """Simulate a serving cluster on a trace or Poisson arrivals and summarise latency, throughput, cost."""
        if control_task or autoscaler or admission:
            from inferencegym.cli.control import simulate_control

            simulate_control(control_task or "cluster_autoscaling", autoscaler, admission, day,
                             0 if seed is None else seed, str(load_windows) if load_windows else None,
                             failures, json_out)
            return
        given = {k: v for k, v in locals().items() if k in DEFAULTS and v is not None}
        opts = dict(DEFAULTS)
        if config is not None:
            data = {str(k).replace("-", "_"): v for k, v in read_yaml_mapping(config).items()}
            unknown = set(data) - set(DEFAULTS)
            if unknown:
                raise typer.BadParameter(f"{config}: unknown option(s) {sorted(unknown)}; "
                                         f"valid: {', '.join(sorted(DEFAULTS))}")
            opts.update(data)
        opts.update(given)
        opts["_spec_acceptance_given"] = spec_acceptance is not None

        opts = validate_simulate_options(opts)  # types and ranges, before anything is allocated
        if opts["trace"] and not Path(opts["trace"]).is_file():
            raise typer.BadParameter(f"trace file not found: {opts['trace']}")
        if opts["results_parquet"]:
            check_output_path(Path(opts["results_parquet"]),
                              inputs=[opts["trace"], config, opts["tenants"]])
        summary, _ = run_scenario(opts, progress=not json_out)
        if json_out:
            typer.echo(json.dumps(json_safe(summary)))
        else:
            _print_table(summary)
