"""Running autoscalers and admission controllers on the control-plane tasks over days and seeds.

A policy spec is ``AUTOSCALER``, ``ADMISSION`` or ``AUTOSCALER+ADMISSION`` (e.g. ``wva+gaie_shed``);
the missing half defaults to ``admit_all`` (autoscaling task) or ``static`` (admission task: the
fixed fleet). Episodes run on the days of a split (``test`` by default) x seeds S, S+1, ...; the
same (day, seed) pairs for every policy, so differences are paired.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

import numpy as np

from inferencegym.policies.admission import ADMISSION, make_admission
from inferencegym.policies.autoscalers import AUTOSCALERS, make_autoscaler
from inferencegym.sim.config import ClusterConfig, ReplicaConfig
from inferencegym.sim.fleet import Fleet, FleetConfig
from inferencegym.tasks.control import (DEFAULT_WINDOWS, ControlContext, ControlTask, arrivals, control_context,
                                        day_rates, day_split, get_control_task, grade, lifecycle_config,
                                        load_windows)

from inferencegym.evaluation.paired import ci95  # (also imported from here by benchmarks)


_LEARNED: dict[str, Callable[[str, str], Any]] = {}
"""Scheme prefix (``pretrained:``, ``checkpoint:``) -> ``handler(spec, task_id)`` returning a learned
autoscaler or admission controller; registered by ``inferencegym.rl`` (a higher layer)."""


def register_control_scheme(prefix: str, handler: Callable[[str, str], Any]) -> None:
    """Resolve control policy parts starting with ``prefix`` by ``handler(spec, task_id)``."""
    _LEARNED[prefix] = handler


def _learned(part: str) -> bool:
    return part.startswith(("pretrained:", "checkpoint:", "http://", "https://"))


def _scheme(part: str) -> str:
    return part.split("//", 1)[0] + "//" if part.startswith("http") else part.split(":", 1)[0] + ":"


def parse_spec(spec: str, task: ControlTask) -> tuple[str, str]:
    """``(autoscaler, admission)`` names of a policy spec (one clear error for a bad one). A learned
    part (``pretrained:TASK``, ``checkpoint:PATH``) is the autoscaler of ``cluster_autoscaling`` and the
    admission controller of ``cluster_admission``."""
    parts = [p.strip() for p in spec.split("+") if p.strip()]
    learned = [p for p in parts if _learned(p)]
    auto = next((p for p in parts if p in AUTOSCALERS), None)
    adm = next((p for p in parts if p in ADMISSION), None)
    bad = [p for p in parts if p not in AUTOSCALERS and p not in ADMISSION and not _learned(p)]
    if bad or not parts or len(parts) > 2 or len(learned) > 1:
        raise ValueError(f"bad control policy {spec!r}: expected AUTOSCALER, ADMISSION or AUTOSCALER+ADMISSION "
                         f"with autoscalers {', '.join(AUTOSCALERS)} and admission controllers "
                         f"{', '.join(ADMISSION)} (or one learned pretrained:TASK / checkpoint:PATH / http://URL)")
    if learned:
        if _scheme(learned[0]) not in _LEARNED:
            provider = "inferencegym.apps.policy_endpoint" if learned[0].startswith("http") else "inferencegym.rl"
            raise ValueError(f"control policy {learned[0]!r} needs {provider} imported (it registers the "
                             f"{_scheme(learned[0])} handler; the CLI does)")
        if task.fixed_replicas:
            adm = adm or learned[0]
        else:
            auto = auto or learned[0]
        if learned[0] not in (auto, adm):
            raise ValueError(f"{spec!r} gives two {'admission controllers' if task.fixed_replicas else 'autoscalers'}")
    if task.fixed_replicas and auto is not None:
        raise ValueError(f"{task.task_id} runs a fixed fleet of {task.initial_replicas} replicas: give an admission "
                         f"controller only ({', '.join(ADMISSION)}), not the autoscaler {auto!r}")
    return (auto or ("static" if task.fixed_replicas else "wva")), (adm or "admit_all")


def _controller(name: str, task: ControlTask, make: Callable[[str], Any]) -> Any:
    if _learned(name):
        return _LEARNED[_scheme(name)](name, task.task_id)
    return make(name)


def run_episode(task: ControlTask | str, spec: str, *, day: int, seed: int, load_windows_path: str | None = None,
                failures: bool = False, admission: Any = None, autoscaler: Any = None) -> dict[str, Any]:
    """One episode; returns the fleet summary plus ``score``, ``episode_s``, ``cpu_s``, ``day``, ``seed``.
    ``admission`` / ``autoscaler``: controller objects used instead of the spec's (training rollouts,
    tests); an admission controller with ``set_future`` (privileged) is given the episode's arrival
    times and tiers."""
    task = get_control_task(task) if isinstance(task, str) else task
    auto_name, adm_name = parse_spec(spec, task)
    windows = load_windows(str(load_windows_path or DEFAULT_WINDOWS))
    rates = day_rates(task, windows, day)
    rng = np.random.default_rng([seed, day])
    a_rng, f_rng = rng.spawn(2)
    arr = arrivals(task, rates, a_rng)
    n_win = 144 if task.episode_s is None else max(1, int(round(task.episode_s / task.window_s)))
    episode_s = n_win * task.window_s
    cc = ClusterConfig(replica=ReplicaConfig(model=task.model, gpu=task.gpu, tensor_parallel=task.tensor_parallel),
                       router="least_outstanding_requests", tenants=task.tenants())
    fc = FleetConfig(lifecycle=lifecycle_config(task, failures), tenant_tiers=task.tenant_tiers())
    fleet = Fleet(cc, fc, arr, rng=f_rng)
    auto = autoscaler if autoscaler is not None else (
        _StaticScaler() if auto_name == "static" else _controller(auto_name, task, make_autoscaler))
    ctx = control_context(task, windows, rates, startup_s=fleet.lifecycle.startup_s(),
                          future_arrivals_s=arr["arrival_s"] if auto_name == "hindsight" else None)
    auto.reset(ctx)
    adm = admission if admission is not None else _controller(adm_name, task, make_admission)
    adm.reset(task.capacity_rps)
    if hasattr(adm, "set_future"):
        adm.set_future(arr["arrival_s"], np.asarray(task.tenant_tiers())[np.asarray(arr["tenant"], dtype=int)])
    fleet.admission = adm
    c0 = time.process_time()
    t = 0.0
    while t < episode_s - 1e-9:
        if not task.fixed_replicas:
            fleet.set_target(auto.act(fleet.observe()))
        t = min(episode_s, t + task.interval_s)
        fleet.run_until(t)
    fleet.finish()
    out = fleet.summary()
    out.update(episode_s=episode_s, cpu_s=time.process_time() - c0, day=day, seed=seed,
               autoscaler=auto_name, admission=adm_name)
    out["score"] = grade(task, out)
    return out


class _StaticScaler:
    name = "static"

    def reset(self, ctx: ControlContext) -> None:
        pass

    def act(self, obs) -> int:
        return obs.target


def episodes_plan(task: ControlTask, episodes: int, seed: int, split: str, load_windows_path: str | None) -> list:
    windows = load_windows(str(load_windows_path or DEFAULT_WINDOWS))
    splits = day_split(len(windows))
    if split not in splits:
        raise ValueError(f"split must be one of {', '.join(splits)}, got {split!r}")
    days = splits[split]
    return [(days[i % len(days)], seed + i) for i in range(episodes)]


def evaluate_control(spec: str, task_id: str, *, episodes: int = 4, seed: int = 1000, split: str = "test",
                     load_windows_path: str | None = None, failures: bool = False,
                     episode_windows: int | None = None,
                     progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Mean over episodes; per-episode values under ``episodes_detail`` for paired comparisons.
    ``episode_windows``: play only that many 10-minute windows (from the task's first window)."""
    task = get_control_task(task_id)
    if episode_windows is not None:
        task = dataclasses.replace(task, episode_s=episode_windows * task.window_s)
    parse_spec(spec, task)
    eps = []
    for i, (day, s) in enumerate(episodes_plan(task, episodes, seed, split, load_windows_path)):
        eps.append(run_episode(task, spec, day=day, seed=s, load_windows_path=load_windows_path,
                               failures=failures))
        if progress:
            progress(i)
    tiers = sorted({k for e in eps for k in e["tier_slo_attainment"]},
                   key=["critical", "standard", "sheddable"].index)

    def mean(key, sub=None):
        v = [e[key][sub] if sub else e[key] for e in eps if (sub is None or sub in e[key])]
        return float(np.nanmean(v)) if v else math.nan

    return {"task": task_id, "policy": spec, "episodes": len(eps), "split": split,
            "score_mean": mean("score"), "score_ci95": ci95([e["score"] for e in eps]),
            "gpu_hours": mean("gpu_hours"), "gpu_hours_ci95": ci95([e["gpu_hours"] for e in eps]),
            "slo_attainment": mean("slo_attainment"),
            "tier_slo_attainment": {t: mean("tier_slo_attainment", t) for t in tiers},
            "tier_ttft_p90_s": {t: mean("tier_ttft_p90_s", t) for t in tiers},
            "rejected": mean("rejected"), "expired": mean("expired"), "crashes": mean("crashes"),
            "cpu_s_per_episode": mean("cpu_s"),
            "episodes_detail": [{k: e[k] for k in ("day", "seed", "score", "gpu_hours", "slo_attainment",
                                                    "tier_slo_attainment", "tier_ttft_p90_s")} for e in eps]}
