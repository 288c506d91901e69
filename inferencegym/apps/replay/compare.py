"""The simulator's prediction for a replayed workload, and the real-vs-simulated report.

The same requests (after the replay's clipping, on the replay's time axis) are run through
``inferencegym.sim.Cluster`` configured like the deployment (model, GPU, tensor parallelism,
replicas, batch cap, scheduler); the per-request tables are then compared metric by metric: p50,
p90, p99, the ratio real/simulated and a two-sample Kolmogorov-Smirnov test (``scipy.stats``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from inferencegym.sim import Request
from inferencegym.tasks import DEFAULT_KNOBS, TaskSpec, get_task
from inferencegym.tasks.adapter import make_cluster

METRICS: tuple[tuple[str, str], ...] = (
    ("ttft_s", "time to first token (s)"),
    ("tpot_s", "time per output token (s)"),
    ("tbt_max_s", "largest gap between tokens (s)"),
    ("e2e_s", "end-to-end latency (s)"),
)


@dataclass(frozen=True, kw_only=True)
class SimTarget:
    """The simulated deployment to hold the real one against."""

    model: str = "llama-2-7b"
    """Model preset of ``inferencegym.sim`` (``ExecutionModel.from_preset``)."""
    gpu: str = "a100-80gb"
    """GPU preset."""
    tensor_parallel: int = 1
    """GPUs per replica."""
    replicas: int = 1
    """Replicas behind the endpoint."""
    router: str = "round_robin"
    """Router between replicas."""
    scheduler: str = DEFAULT_KNOBS.scheduler
    """Batching policy: ``vllm``, ``sarathi`` or ``static``."""
    batch_cap: int = DEFAULT_KNOBS.batch_cap
    """Max running sequences per replica (vLLM ``max_num_seqs``)."""
    kv_budget_fraction: float = DEFAULT_KNOBS.kv_budget_fraction
    """Share of free GPU memory for the KV cache (vLLM ``gpu_memory_utilization``-like)."""
    chunk_size: int = 512
    """Prefill chunk size (``sarathi``)."""
    seed: int = 0
    """Seed of the simulator's Generator."""

    @classmethod
    def from_task(cls, task_id: str, **overrides: Any) -> "SimTarget":
        """The cluster of a task, with the task's initial knobs (what the envs start from)."""
        t = get_task(task_id)
        base = dict(model=t.model, gpu=t.gpu, tensor_parallel=t.tensor_parallel, replicas=t.replicas,
                    router=t.router, scheduler=t.knobs.scheduler, batch_cap=t.knobs.batch_cap,
                    kv_budget_fraction=t.knobs.kv_budget_fraction, chunk_size=t.chunk_size_tokens)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    def to_task(self) -> TaskSpec:
        """This deployment as a (single-tenant) task, for the task -> simulator adapter."""
        knobs = dataclasses.replace(DEFAULT_KNOBS, scheduler=self.scheduler, batch_cap=self.batch_cap,
                                    kv_budget_fraction=self.kv_budget_fraction)
        return TaskSpec(task_id="_replay_target", model=self.model, gpu=self.gpu,
                        tensor_parallel=self.tensor_parallel, replicas=self.replicas,
                        router=self.router, knobs=knobs, chunk_size_tokens=self.chunk_size)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def simulate(arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
             target: SimTarget, block_hashes: list[tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """Run the requests through the simulator; ``Cluster.results()`` per-request table.
    ``block_hashes`` (per request, from the workload's hash chains) let the simulator share prefixes."""
    cluster = make_cluster(target.to_task(), np.random.default_rng(target.seed))
    reqs = [Request(req_id=i, arrival_s=float(arrival_s[i]), prompt_tokens=int(prompt_tokens[i]),
                    output_tokens=int(output_tokens[i]),
                    block_hashes=block_hashes[i] if block_hashes is not None else ())
            for i in range(len(arrival_s))]
    cluster.submit(reqs)
    cluster.drain()
    return cluster.results()


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def _pcts(x: np.ndarray) -> dict[str, float | None]:
    if x.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(x.mean())}


def prefix_cache_report(real: dict[str, np.ndarray], sim: dict[str, np.ndarray] | None,
                        engine_prefix: dict[str, Any] | None, hit_bound: float | None) -> dict[str, Any]:
    """Prefix-cache hit rates side by side (token-weighted; None where a side does not report one):
    the engine's ``/metrics`` counters, the engine's per-response ``cached_tokens``, the simulator's
    per-request ``cached_tokens`` column (when it has one), and the workload's infinite-cache bound."""
    ok = ~np.asarray(real["rejected"], dtype=bool)
    cached = np.asarray(real.get("cached_tokens_reported", np.full(ok.size, -1)))[ok]
    prompt = np.asarray(real.get("prompt_tokens_reported", np.full(ok.size, -1)))[ok]
    has = (cached >= 0) & (prompt > 0)
    usage_rate = float(cached[has].sum() / prompt[has].sum()) if has.any() else None
    sim_rate = None
    if sim is not None and "cached_tokens" in sim:
        sim_ok = ~np.asarray(sim["rejected"], dtype=bool)
        tot = np.asarray(sim["prompt_tokens"])[sim_ok].sum()
        sim_rate = float(np.asarray(sim["cached_tokens"])[sim_ok].sum() / tot) if tot else None
    return {"engine_metrics": (engine_prefix or {}).get("hit_rate"), "engine_usage": usage_rate,
            "engine_usage_requests": int(has.sum()), "sim": sim_rate, "trace_hit_bound": hit_bound,
            "engine_counters": engine_prefix}


def compare(real: dict[str, np.ndarray], sim: dict[str, np.ndarray] | None,
            real_itl_s: np.ndarray | None = None, *, engine_prefix: dict[str, Any] | None = None,
            hit_bound: float | None = None) -> dict[str, Any]:
    """Metric-by-metric comparison (JSON-ready). ``sim=None`` reports the real side only.
    ``engine_prefix`` / ``hit_bound`` add the prefix-cache hit rates (`prefix_cache_report`)."""

    ok = ~np.asarray(real["rejected"], dtype=bool)
    out: dict[str, Any] = {"requests": int(ok.size), "failed": int((~ok).sum()), "metrics": {}}
    if sim is not None:
        sim_ok = ~np.asarray(sim["rejected"], dtype=bool)
        out["sim_requests"] = int(sim_ok.size)
        out["sim_rejected"] = int((~sim_ok).sum())
    for name, label in METRICS:
        r = _finite(np.asarray(real[name])[ok])
        row: dict[str, Any] = {"label": label, "real": _pcts(r)}
        if sim is not None:
            s = _finite(np.asarray(sim[name])[sim_ok])
            row["sim"] = _pcts(s)
            for q in ("p50", "p99"):
                a, b = row["real"][q], row["sim"][q]
                row[f"ratio_{q}"] = (a / b) if (a is not None and b) else None
            if r.size >= 2 and s.size >= 2:
                ks = stats.ks_2samp(r, s)
                row["ks_stat"], row["ks_pvalue"] = float(ks.statistic), float(ks.pvalue)
        out["metrics"][name] = row
    if real_itl_s is not None:
        out["real_itl"] = _pcts(_finite(real_itl_s))
    wait = _finite(np.asarray(real.get("client_wait_s", np.zeros(0)))[ok]) if "client_wait_s" in real \
        else np.zeros(0)
    out["client_wait"] = _pcts(wait)
    out["prefix_cache"] = prefix_cache_report(real, sim, engine_prefix, hit_bound)
    return out


def render(report: dict[str, Any], console: Any = None) -> None:
    """A rich table of :func:`compare`'s report."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()

    def f(v: Any, digits: int = 4) -> str:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return "-"
        return f"{v:.{digits}g}"

    has_sim = any("sim" in r for r in report["metrics"].values())
    table = Table(title="real endpoint vs simulator (per request)")
    table.add_column("metric")
    for side in (["real", "sim"] if has_sim else ["real"]):
        for q in ("p50", "p90", "p99"):
            table.add_column(f"{side} {q}", justify="right")
    if has_sim:
        table.add_column("real/sim p50", justify="right")
        table.add_column("real/sim p99", justify="right")
        table.add_column("KS stat (p)", justify="right")
    for name, row in report["metrics"].items():
        cells = [name]
        for side in (["real", "sim"] if has_sim else ["real"]):
            cells += [f(row[side][q]) for q in ("p50", "p90", "p99")]
        if has_sim:
            cells += [f(row.get("ratio_p50"), 3), f(row.get("ratio_p99"), 3),
                      f"{f(row.get('ks_stat'), 3)} ({f(row.get('ks_pvalue'), 2)})"]
        table.add_row(*cells)
    console.print(table)
    msg = f"{report['requests']} requests, {report['failed']} failed"
    if "sim_rejected" in report:
        msg += f"; simulator rejected {report['sim_rejected']}"
    pc = report.get("prefix_cache") or {}
    rates = [(label, pc.get(key)) for label, key in (("engine /metrics", "engine_metrics"),
                                                      ("engine usage.cached_tokens", "engine_usage"),
                                                      ("simulator", "sim"),
                                                      ("workload infinite-cache bound", "trace_hit_bound"))]
    if any(v is not None for _, v in rates):
        ptable = Table(title="prefix-cache hit rate (token-weighted)")
        for label, _ in rates:
            ptable.add_column(label, justify="right")
        ptable.add_row(*[f(v, 3) if v is not None else "-" for _, v in rates])
        console.print(ptable)
    cw = report.get("client_wait", {})
    if cw.get("p99") is not None:
        msg += f"; client-side wait p99 {f(cw['p99'])} s (raise --concurrency if large)"
    console.print(msg)
