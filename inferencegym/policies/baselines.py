"""Baseline policies of the single-agent serving env (one-method classes: ``act(obs, info)``).

- ``random``: a uniformly random configuration every window (own Generator, seeded per episode).
- ``static_default``: vLLM's defaults, never changed: ``max_num_seqs=256``,
  ``gpu_memory_utilization=0.9``, no speculation, FP16, no chunked prefill / disaggregation, FCFS.
- ``heuristic``: reactive rules in the spirit of Orca / vLLM / Decima, from the observation only.
- ``best_static``: the best fixed configuration found by a grid search on TRAINING seeds
  (``python -m inferencegym.evaluation.search_best_static``; shipped in
  ``inferencegym/data/best_static.json``; evaluation seeds are disjoint).
- ``clairvoyant``: sees the hidden workload phase and the next window's arrivals (``info["oracle/*"]``)
  and applies a per-phase configuration: an upper reference, not a competitor.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from inferencegym.envs.actions import (
    BATCH_CAP_MAX,
    KV_FRACTION_MAX,
    KV_FRACTION_MIN,
    QUANTIZATION_TIERS,
    SPECULATION_MAX,
    ServeAction,
)
from inferencegym.envs.serve_env import OBS_FEATURES
from inferencegym.policies import register_policy
from inferencegym.sim.execution import ExecutionModel
from inferencegym.tasks.spec import get_task

_I = {name: i for i, name in enumerate(OBS_FEATURES)}

VLLM_DEFAULT = ServeAction(batch_cap=256, kv_budget_fraction=0.9, speculation_depth=0,
                           quantization_tier="FP16", prefill_decode_split=False, priority_routing=False)
"""vLLM defaults (max_num_seqs 256, gpu_memory_utilization 0.9, no speculation/quantization/chunking)."""


def _bound(v: int) -> np.ndarray:
    """A 0-d int array: ``Generator.integers`` converts its bounds with ``np.asarray`` and takes the
    scalar path for 0-d ones, so an array bound draws exactly what the int would, without the
    conversion (~0.3 us a draw)."""
    return np.array(v, dtype=np.int64)


_B0, _B1, _B2 = _bound(0), _bound(1), _bound(2)
_CAP_HI, _SPEC_HI, _TIER_HI = _bound(BATCH_CAP_MAX + 1), _bound(SPECULATION_MAX + 1), _bound(len(QUANTIZATION_TIERS))
_KV_RANGE = KV_FRACTION_MAX - KV_FRACTION_MIN
"""``Generator.uniform(low, high)`` is ``low + (high - low) * random()`` (numpy's
``random_uniform``): the same double from the same bits, without ``uniform``'s argument handling."""


class RandomPolicy:
    """Uniformly random configuration each window."""

    def __init__(self, task_id: str, seed: int | None = 0):
        self.task_id = task_id
        self.reset(seed)

    def reset(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, obs: Any, info: dict | None = None) -> ServeAction:
        r = self._rng
        # the draws of ``integers(1, BATCH_CAP_MAX + 1)``, ``uniform(KV_FRACTION_MIN,
        # KV_FRACTION_MAX)``, ``integers(0, SPECULATION_MAX + 1)``, ``integers(0, 3)``,
        # ``integers(0, 2)`` twice, in this order, made cheaper (same stream: see ``_bound`` and
        # ``_KV_RANGE``; ``tests/policies/test_random_stream.py``)
        integers = r.integers
        return ServeAction(
            batch_cap=int(integers(_B1, _CAP_HI)),
            kv_budget_fraction=KV_FRACTION_MIN + _KV_RANGE * r.random(),
            speculation_depth=int(integers(_B0, _SPEC_HI)),
            quantization_tier=QUANTIZATION_TIERS[int(integers(_B0, _TIER_HI))],
            prefill_decode_split=bool(integers(_B0, _B2)),
            priority_routing=bool(integers(_B0, _B2)),
        )


class StaticPolicy:
    """Always the same configuration."""

    def __init__(self, action: ServeAction):
        self.action = action

    def act(self, obs: Any, info: dict | None = None) -> ServeAction:
        return self.action


SPEC_MAX_RUNNING_PER_REPLICA = 32
"""The heuristic speculates (depth 2) while at most this many sequences run per replica."""


class HeuristicPolicy:
    """Reactive rules from the observation only (no oracle), in the spirit of Orca / vLLM / Decima:

    - batch cap from queue pressure: double it (up to 256) while requests queue; halve it (down to
      16) while nothing queues and the median time between tokens is over the tightest TBT SLO;
    - KV headroom: full KV budget after preemptions or above 90 % occupancy, else 0.9;
    - speculation below large batches: depth 2 while at most 32 sequences run per replica, else
      off (speculative decoding pays while decoding is memory-bound and costs at large batches,
      where verifying drafts competes for compute: the rule of thumb of vLLM's docs and SmartSpec);
    - prefill/decode split on long prompts: on when a whole-prompt prefill of the window's median
      prompt would take longer than the tightest TBT SLO (it would stall running decodes past
      their SLO; prefill time from the task's execution model), off after 5 windows without;
    - priority routing when a priority tenant's SLO attainment falls under 95 %, off after 5
      windows at >= 99 %;
    - FP16 always (never trades quality).
    """

    def __init__(self, task_id: str):
        self.task = get_task(task_id)
        self.has_prio = any(t.priority == 1 for t in self.task.tenants)
        self.tbt_slo = min(t.tbt_slo_s for t in self.task.tenants)
        self._model = ExecutionModel.from_preset(model=self.task.model, gpu=self.task.gpu,
                                                 tensor_parallel=self.task.tensor_parallel,
                                                 engine_profile=self.task.engine_profile)
        self._prefill_cache: dict[int, float] = {}
        self._actions: dict[tuple, ServeAction] = {}
        self.reset()

    def _long_prompt(self, mean_prompt_tokens: float) -> bool:
        if mean_prompt_tokens < 1:
            return False
        key = int(mean_prompt_tokens // 64) * 64 + 32  # memoised per 64-token bucket
        t = self._prefill_cache.get(key)
        if t is None:
            t = self._prefill_cache[key] = float(self._model.prefill_time_s(prompt_tokens=key))
        return t > self.tbt_slo

    def reset(self, seed: int | None = None) -> None:
        self.cap = 256
        self.split = False
        self.prio = False
        self.calm_split = 0
        self.calm_prio = 0

    def act(self, obs: Any, info: dict | None = None) -> ServeAction:
        # the features as Python floats (float32 -> float64 exactly, as np.asarray(obs, float64))
        o = obs.tolist() if isinstance(obs, np.ndarray) and obs.ndim == 1 else \
            np.asarray(obs, dtype=np.float64).tolist()
        rb = self.task.ref_batch
        queue = o[_I["queue_depth"]] * rb
        running = o[_I["running"]] * rb
        if queue >= 1:
            self.cap = min(256, self.cap * 2)
        elif o[_I["itl_p50"]] > 1.0:
            self.cap = max(16, self.cap // 2)
        kv = 1.0 if (o[_I["evictions"]] > 0 or o[_I["kv_occupancy"]] > 0.9) else 0.9
        spec = 2 if running <= SPEC_MAX_RUNNING_PER_REPLICA * self.task.replicas else 0
        if self._long_prompt(o[_I["median_prompt_tokens"]] * 1000.0):
            self.split, self.calm_split = True, 0
        else:
            self.calm_split += 1
            if self.calm_split >= 5:
                self.split = False
        if self.has_prio:
            if o[_I["priority_slo"]] < 0.95:
                self.prio, self.calm_prio = True, 0
            elif o[_I["priority_slo"]] >= 0.99:
                self.calm_prio += 1
                if self.calm_prio >= 5:
                    self.prio = False
        key = (self.cap, kv, spec, self.split, self.prio)
        a = self._actions.get(key)
        if a is None:  # (frozen: one object per configuration, built and validated once)
            a = self._actions[key] = ServeAction(
                batch_cap=self.cap, kv_budget_fraction=kv, speculation_depth=spec, quantization_tier="FP16",
                prefill_decode_split=self.split, priority_routing=self.prio)
        return a


@lru_cache(maxsize=4)
def _data_table(filename: str) -> dict[str, Any]:
    """A shipped JSON table of ``inferencegym/data`` ({} when it is not there)."""
    try:
        text = resources.files("inferencegym").joinpath("data", filename).read_text()
    except (FileNotFoundError, ModuleNotFoundError):
        return {}
    return json.loads(text)


def _best_static_table() -> dict[str, Any]:
    return _data_table("best_static.json")


def best_static_action(task_id: str) -> ServeAction:
    """The shipped best fixed configuration of ``task_id``."""
    table = _best_static_table().get("tasks", {})
    if task_id not in table:
        raise ValueError(f"no best_static configuration shipped for task {task_id!r} (have: "
                         f"{', '.join(table) or 'none'}); run `python -m "
                         f"inferencegym.evaluation.search_best_static --task {task_id}`")
    return ServeAction(**table[task_id]["action"])


def _clairvoyant_table() -> dict[str, Any]:
    return _data_table("clairvoyant.json")


class ClairvoyantPolicy:
    """Per-phase configuration chosen with knowledge of the hidden phase of the next window
    (``info["oracle/phase_name"]``). The configuration per phase is searched on training seeds
    (``search_best_static --clairvoyant``) and shipped in ``inferencegym/data/clairvoyant.json``;
    a phase missing from the table uses the task's best static configuration.

    Privileged: it needs an env built with ``privileged=True`` (the evaluation does that for it);
    the HTTP server never serves it."""

    privileged = True

    def __init__(self, task_id: str):
        self.task = get_task(task_id)
        self.default = best_static_action(task_id)
        table = _clairvoyant_table().get("tasks", {}).get(task_id, {}).get("phases", {})
        self.by_phase = {k: ServeAction(**v) for k, v in table.items()}

    def act(self, obs: Any, info: dict | None = None) -> ServeAction:
        if not info or "oracle/phase_name" not in info:
            raise ValueError("clairvoyant needs the env's info dict with the oracle/* keys "
                             "(build the env with privileged=True and pass info to act)")
        return self.by_phase.get(info["oracle/phase_name"], self.default)


register_policy("random", lambda task_id: RandomPolicy(task_id),
                "uniformly random configuration every window")
register_policy("static_default", lambda task_id: StaticPolicy(VLLM_DEFAULT),
                "vLLM defaults, fixed (max_num_seqs 256, gpu_memory_utilization 0.9, FP16)")
register_policy("heuristic", lambda task_id: HeuristicPolicy(task_id),
                "reactive rules (queue pressure, KV headroom, low-load speculation, long-prompt split, "
                "priority on SLO risk)")
register_policy("best_static", lambda task_id: StaticPolicy(best_static_action(task_id)),
                "best fixed configuration from a search on training seeds")
register_policy("clairvoyant", lambda task_id: ClairvoyantPolicy(task_id),
                "sees the hidden workload phase; per-phase configuration (upper reference)",
                privileged=True)

# Exploit probes (used by the tests; fixed degenerate configurations)
EXPLOITS: dict[str, ServeAction] = {
    "drop_traffic": ServeAction(batch_cap=1, kv_budget_fraction=0.1),
    "infinite_batching": ServeAction(batch_cap=512, kv_budget_fraction=1.0, speculation_depth=8),
    "int4_forever": ServeAction(quantization_tier="INT4"),
    "priority_always": ServeAction(priority_routing=True),
}


def _llm_policy(task_id: str):
    from inferencegym.policies.llm import make_llm_policy  # openai client: imported only when used

    return make_llm_policy(task_id)


register_policy("llm", _llm_policy,
                "zero-shot chat model through the openai client (API_BASE_URL, MODEL_NAME, HF_TOKEN)")

