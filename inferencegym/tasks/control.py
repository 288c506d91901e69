"""Control-plane tasks: ``cluster_autoscaling`` and ``cluster_admission`` (issue 22).

An episode is one day (autoscaling) or one hour (admission) of load shaped by ServeGen's
production windows (``../shared/reference/traces/servegen/``, Alibaba Model Studio, 14 days of
10-minute windows): the per-window request rate summed over every client, scaled so that the
file's highest window maps to ``peak_fraction`` of the fleet's full capacity. Zero windows
(collection gaps) take the previous window's rate. Within a window arrivals are Poisson; bursts
(``bursts_per_day`` of ``burst_factor`` x the rate for 30-120 s) are drawn per seed.

**Time compression** (``window_s``, default 150 s per 10-minute window, factor 4): a day then
costs ~20 s of CPU instead of ~80 s, so training over many days is practical. Rates are those of
the windows (not scaled); controller time constants (HPA 300 s, KPA 60 s / 6 s, provisioning
30 s, loading, warm-up) are real seconds, so the daily ramps are 4x steeper relative to the
start-up delay than in production: a harder, not easier, autoscaling problem. ``window_s=600``
plays the day uncompressed.

Days split by index: with 14 days, 0-9 train, 10-11 validation, 12-13 test (other files: the last
two days test, the two before validation, the rest train; a one-day file uses its day everywhere).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from inferencegym.sim.config import TenantSpec
from inferencegym.sim.lifecycle import LifecycleConfig
from inferencegym.workload.lengths import LognormalLengths

WINDOWS_PER_DAY = 144
SOURCE_WINDOW_S = 600.0
_REF = os.environ.get("INFERENCEGYM_REFERENCE_DIR") or str(Path(__file__).resolve().parents[2].parent / "shared"
                                                            / "reference")
DEFAULT_WINDOWS = Path(_REF) / "traces" / "servegen" / "language__m-large__windows.parquet"
"""The default load: ServeGen's language m-large windows (``--load-windows`` swaps in another file)."""


@dataclass(frozen=True, kw_only=True)
class ControlTask:
    """One control-plane task (see module docstring and docs/control_plane.md)."""

    task_id: str
    description: str
    model: str = "llama-3-70b"
    gpu: str = "a100-80gb"
    tensor_parallel: int = 4
    capacity_rps: float = 3.5
    """Measured: highest Poisson rate one replica serves at >= 95 % SLO attainment
    (``benchmarks/control_capacity.py``)."""
    concurrency_at_capacity: float = 70.0
    """Measured: mean running + waiting requests of one replica at ``capacity_rps``."""
    max_replicas: int = 12
    initial_replicas: int = 4
    peak_fraction: float = 0.8
    """The windows file's highest window = this fraction of ``max_replicas * capacity_rps``."""
    window_s: float = 150.0
    """Simulated seconds per 10-minute source window (600 = no compression)."""
    interval_s: float = 15.0
    """Control interval: the autoscaler acts every this many seconds (HPA's sync period)."""
    episode_s: float | None = None
    """Episode length (None: one whole day, 144 windows)."""
    start_window: int = 0
    """First window of the day played (admission: the busiest hour is chosen per day)."""
    bursts_per_day: float = 6.0
    burst_factor: float = 2.0
    tiers: tuple[tuple[str, int, float], ...] = (("standard", 1, 1.0),)
    """Tenants: (name, tier index 0 critical / 1 standard / 2 sheddable, share of requests)."""
    ttft_slo_s: float = 2.0
    tpot_slo_s: float = 0.2
    fixed_replicas: bool = False
    """Admission task: the fleet stays at ``initial_replicas`` (spikes exceed any scaling)."""
    grade_cost_weight: float = 0.3
    """Autoscaling grade: (1 - w) * SLO attainment + w * (1 - GPU-hours / always-max GPU-hours)."""
    tier_weights: tuple[float, float, float] = (0.6, 0.3, 0.1)
    """Admission grade: weights of critical / standard / sheddable SLO attainment."""
    prompt_mu: float = 6.4
    prompt_sigma: float = 0.8
    output_mu: float = 5.0
    output_sigma: float = 0.7

    def tenants(self) -> tuple[TenantSpec, ...]:
        return tuple(TenantSpec(name=n, ttft_slo_s=self.ttft_slo_s, tbt_slo_s=self.tpot_slo_s)
                     for n, _, _ in self.tiers)

    def tenant_tiers(self) -> tuple[int, ...]:
        return tuple(t for _, t, _ in self.tiers)

    def peak_rps(self) -> float:
        return self.peak_fraction * self.max_replicas * self.capacity_rps

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class ControlContext:
    """What a controller may know before the episode (the task's published facts)."""

    capacity_rps: float
    """Measured sustainable request rate of one replica at the SLO."""
    concurrency_at_capacity: float
    """Measured running + waiting requests per replica at ``capacity_rps``."""
    max_replicas: int
    min_replicas: int = 1
    interval_s: float = 15.0
    """Control interval (the agent acts every interval)."""
    startup_s: float = 70.0
    """Expected delay from a scale-up request to a serving replica."""
    window_s: float = 150.0
    """Simulated seconds per 10-minute source window (time compression 600 / window_s)."""
    profile_rps: tuple[float, ...] = ()
    """Rate per source window of a day from the episode's first window on, p90 over the training
    days (for ``scheduled`` and the learned controllers' time-of-day features)."""
    start_window: int = 0
    """The day's source window the episode starts at (time of day = start_window + now / window_s)."""
    future_arrivals_s: np.ndarray | None = field(default=None, repr=False)
    """Privileged: the episode's realized arrival times (``hindsight`` only)."""

    def clamp(self, n: float) -> int:
        return int(min(self.max_replicas, max(self.min_replicas, n)))


@lru_cache(maxsize=8)
def load_windows(path: str) -> np.ndarray:
    """(days, 144) summed request rate per 10-minute window of a ServeGen windows file, gaps filled."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--load-windows: file not found: {path}; give a ServeGen *__windows.parquet file")
    try:
        t = pq.read_table(str(p), columns=["window_start_s", "rate"])
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise ValueError(f"--load-windows: {path} is not a ServeGen windows Parquet file with columns "
                         f"window_start_s, rate ({type(exc).__name__})") from None
    g = t.group_by("window_start_s").aggregate([("rate", "sum")]).sort_by("window_start_s")
    starts = g["window_start_s"].to_numpy()
    rates = g["rate_sum"].to_numpy().astype(float)
    n = int(pc.max(g["window_start_s"]).as_py() // SOURCE_WINDOW_S) + 1
    n_days = max(1, n // WINDOWS_PER_DAY)
    full = np.zeros(n_days * WINDOWS_PER_DAY)
    idx = (starts // SOURCE_WINDOW_S).astype(int)
    keep = idx < len(full)
    full[idx[keep]] = rates[keep]
    if not np.any(full > 0):
        raise ValueError(f"--load-windows: {path} has no window with a positive rate")
    for i in range(len(full)):
        if full[i] <= 0:
            full[i] = full[i - 1] if i > 0 else full[full > 0][0]
    return full.reshape(n_days, WINDOWS_PER_DAY)


def day_split(n_days: int) -> dict[str, list[int]]:
    if n_days == 1:
        return {"train": [0], "validation": [0], "test": [0]}
    if n_days < 5:
        return {"train": list(range(n_days - 1)), "validation": [n_days - 1], "test": [n_days - 1]}
    return {"train": list(range(n_days - 4)), "validation": [n_days - 4, n_days - 3],
            "test": [n_days - 2, n_days - 1]}


def day_rates(task: ControlTask, windows: np.ndarray, day: int) -> np.ndarray:
    """Request rate (req/s) per 10-minute window of ``day``, scaled to the task's fleet."""
    if not 0 <= day < len(windows):
        raise ValueError(f"day must be in 0..{len(windows) - 1} for this windows file, got {day}")
    return windows[day] / windows.max() * task.peak_rps()


def training_profile(task: ControlTask, windows: np.ndarray) -> tuple[float, ...]:
    """p90 over the training days of each window's rate (what ``scheduled`` provisions for)."""
    days = day_split(len(windows))["train"]
    return tuple(float(x) for x in np.percentile(np.stack([day_rates(task, windows, d) for d in days]), 90, axis=0))


def control_context(task: ControlTask, windows: np.ndarray, rates: np.ndarray, *, startup_s: float,
                    future_arrivals_s: np.ndarray | None = None) -> ControlContext:
    """What a controller of ``task`` knows before an episode on the day of ``rates`` (``future_arrivals_s``:
    the privileged ceiling only)."""
    w0, _ = episode_windows(task, rates)
    return ControlContext(capacity_rps=task.capacity_rps, concurrency_at_capacity=task.concurrency_at_capacity,
                          max_replicas=task.max_replicas, interval_s=task.interval_s, startup_s=startup_s,
                          window_s=task.window_s, profile_rps=training_profile(task, windows)[w0:],
                          start_window=w0, future_arrivals_s=future_arrivals_s)


def episode_windows(task: ControlTask, rates: np.ndarray) -> tuple[int, int]:
    """(first window, number of windows) the episode plays."""
    if task.episode_s is None:
        return 0, WINDOWS_PER_DAY
    n = max(1, int(round(task.episode_s / task.window_s)))
    if task.fixed_replicas:  # admission: the day's busiest stretch
        sums = np.convolve(rates, np.ones(n), mode="valid")
        return int(sums.argmax()), n
    return task.start_window, n


def arrivals(task: ControlTask, rates: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The episode's requests: Poisson per window at the window's rate, plus bursts; lengths
    lognormal; tenants drawn by share."""
    w0, nw = episode_windows(task, rates)
    r = rates[w0:w0 + nw]
    ws = task.window_s
    dur = nw * ws
    edges = [0.0, dur]
    n_b = rng.poisson(task.bursts_per_day * dur / (WINDOWS_PER_DAY * ws))
    bursts = []
    for _ in range(n_b):
        b0 = float(rng.uniform(0, dur))
        b1 = min(dur, b0 + float(rng.uniform(30.0, 120.0)))
        bursts.append((b0, b1))
        edges += [b0, b1]
    edges += [k * ws for k in range(1, nw)]
    edges = np.unique(np.array(edges))
    times = []
    for a, b in zip(edges[:-1], edges[1:]):
        mid = 0.5 * (a + b)
        lam = r[min(int(mid // ws), nw - 1)]
        lam *= task.burst_factor ** sum(1 for b0, b1 in bursts if b0 <= mid < b1)
        k = rng.poisson(lam * (b - a))
        times.append(np.sort(rng.uniform(a, b, k)))
    t = np.concatenate(times) if times else np.zeros(0)
    n = len(t)
    lengths = LognormalLengths(prompt_mu=task.prompt_mu, prompt_sigma=task.prompt_sigma,
                               output_mu=task.output_mu, output_sigma=task.output_sigma,
                               max_tokens=(4096, 1024))
    p, o = lengths.sample(n, rng)
    shares = np.array([s for _, _, s in task.tiers], dtype=float)
    ten = rng.choice(len(shares), size=n, p=shares / shares.sum()) if len(shares) > 1 else np.zeros(n, int)
    return {"arrival_s": t, "prompt_tokens": p, "output_tokens": o, "tenant": ten}


def grade(task: ControlTask, summary: dict) -> float:
    """Score in [0, 1] (formulas in ``ControlTask.grade_cost_weight`` / ``tier_weights``)."""
    if task.fixed_replicas:
        ta = summary["tier_slo_attainment"]
        ws = [(w, ta.get(name)) for w, name in zip(task.tier_weights, ("critical", "standard", "sheddable"))]
        ws = [(w, a) for w, a in ws if a is not None]
        return float(sum(w * a for w, a in ws) / sum(w for w, _ in ws))
    max_gh = task.max_replicas * task.tensor_parallel * summary["episode_s"] / 3600.0
    w = task.grade_cost_weight
    return float((1 - w) * summary["slo_attainment"] + w * max(0.0, 1.0 - summary["gpu_hours"] / max_gh))


CONTROL_TASKS: dict[str, ControlTask] = {
    "cluster_autoscaling": ControlTask(
        task_id="cluster_autoscaling",
        description="one day of ServeGen load (14-day windows, 4x time compression), bursts; set the "
                    "replica count every 15 s; grade 0.7 SLO attainment + 0.3 GPU-hours saved"),
    "cluster_admission": ControlTask(
        task_id="cluster_admission",
        description="the day's busiest hour on 6 fixed replicas with 4x overload spikes; three tiers "
                    "(critical 20 %, standard 50 %, sheddable 30 %); admit / defer / reject each request",
        max_replicas=6, initial_replicas=6, fixed_replicas=True, peak_fraction=0.9, episode_s=3600.0,
        bursts_per_day=48.0, burst_factor=4.0,
        tiers=(("critical", 0, 0.2), ("standard", 1, 0.5), ("sheddable", 2, 0.3))),
}


def lifecycle_config(task: ControlTask, failures: bool) -> LifecycleConfig:
    """The task's replica lifecycle; ``failures`` switches crashes and stragglers on."""
    extra: dict[str, Any] = {}
    if failures:  # one crash per replica per ~4 simulated hours, a straggler episode per ~2 hours
        extra = {"mtbf_s": 4 * 3600.0, "straggler_interval_s": 2 * 3600.0}
    return LifecycleConfig(max_replicas=task.max_replicas, initial_replicas=task.initial_replicas, **extra)


def get_control_task(task_id: str) -> ControlTask:
    if task_id not in CONTROL_TASKS:
        raise ValueError(f"unknown control task {task_id!r}; valid: {', '.join(CONTROL_TASKS)}")
    return CONTROL_TASKS[task_id]
