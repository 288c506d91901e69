"""``LLMServeEnv``: one agent sets the serving configuration of an LLM cluster every control window."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from inferencegym.envs.actions import (
    BATCH_CAP_MAX,
    QUANTIZATION_TIERS,
    SPECULATION_MAX,
    InvalidActionError,
    ServeAction,
    action_space,
)
from inferencegym.envs.curriculum import CurriculumMixin
from inferencegym.envs.reward import REWARD_COMPONENTS, RewardConfig, grade_term, reward_components, total_reward
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.presets import get_gpu
from inferencegym.tasks.adapter import make_cluster, requests_from_workload
from inferencegym.tasks.episode_workload import EpisodeWorkload, generate_episode_workload, mean_output_tokens
from inferencegym.tasks.graders import EpisodeLog, GradeResult, WindowRecord, grade
from inferencegym.tasks.spec import TaskSpec, get_task, list_tasks

OBS_FEATURES: tuple[str, ...] = (
    "queue_depth",          # 0  queued requests at window end / task.ref_batch
    "running",              # 1  running (active) requests at window end / task.ref_batch
    "kv_occupancy",         # 2  mean KV-cache occupancy over the window, 0..1
    "mean_prompt_tokens",   # 3  mean prompt length of the window's arrivals / 1000
    "ttft_p50",             # 4  p50 TTFT of first tokens in the window / tightest TTFT SLO
    "ttft_p99",             # 5  p99 TTFT / tightest TTFT SLO
    "itl_p50",              # 6  p50 inter-token latency / tightest TBT SLO
    "throughput",           # 7  output tokens/s produced / nominal offered output tokens/s
    "slo_compliance",       # 8  share of requests finishing in the window within SLO, 0..1
    "gpu_mem_used",         # 9  GPU memory used (weights + KV in use) / GPU memory, 0..1
    "cost_per_1k_tokens",   # 10 window GPU cost per 1k produced tokens / task cost reference
    "arrival_rate",         # 11 arrivals per second in the window / nominal arrival rate
    "spec_acceptance",      # 12 measured speculative acceptance rate, 0..1 (0 when off)
    "evictions",            # 13 preemptions in the window / task.ref_batch
    "step",                 # 14 step index / episode length, 0..1
    "tbt_p99",              # 15 p99 time between tokens / tightest TBT SLO
    "priority_slo",         # 16 SLO compliance of the priority tenant(s) (overall when none)
    "cfg_batch_cap",        # 17 current batch_cap / 512
    "cfg_kv_budget",        # 18 current kv_budget_fraction
    "cfg_speculation",      # 19 current speculation_depth / 8
    "cfg_quantization",     # 20 current tier index / 2 (FP16 0, INT8 0.5, INT4 1)
    "cfg_split",            # 21 prefill_decode_split 0/1
    "cfg_priority",         # 22 priority_routing 0/1
    "median_prompt_tokens", # 23 median prompt length of the window's arrivals / 1000
)
"""Observation feature order (``observation_space`` is ``Box(0, inf, (24,), float32)``)."""

RAW_KEYS: tuple[str, ...] = (
    "queue_depth", "running", "kv_occupancy", "mean_prompt_tokens", "ttft_p50_s", "ttft_p99_s",
    "itl_p50_s", "tbt_p99_s", "throughput_tok_s", "slo_compliance", "gpu_mem_used_frac",
    "cost_per_1k_tokens", "arrival_rate_rps", "spec_acceptance", "preemptions", "completions",
    "arrivals", "first_tokens", "tbt_samples", "offered_tokens", "produced_tokens", "window_usd",
    "quality_delta", "priority_slo_compliance", "rejections", "median_prompt_tokens",
)
"""Raw (unnormalised) window figures, in ``info`` as ``sim/<key>``."""

_NAN = math.nan
_SIM_INFO_KEYS = {k: f"sim/{k}" for k in (*RAW_KEYS, "ttft_slo_s", "tbt_slo_s")}
"""Raw window key -> its ``info`` key (formatted once)."""
_REWARD_INFO_KEYS = {k: f"reward/{k}" for k in REWARD_COMPONENTS}
"""Reward component -> its ``info`` key."""


def _f(x: Any) -> float:
    """float, NaN -> 0 (no sample in the window)."""
    x = float(x)
    return 0.0 if x != x else x


def _gpu_mem_gb(gpu) -> float:
    """Device memory in GB (1e9 bytes), the unit of ``WindowStats.gpu_memory_used_gb``."""
    return float(gpu.memory_bytes) / 1e9


def nominal_rates(task: TaskSpec) -> tuple[float, float]:
    """(mean arrival rate in req/s, mean offered output tokens/s) of the task's workload, from
    its spec (used to normalise observations; never from a realised episode)."""
    w = task.workload
    if w.process == "onoff":
        p_on = w.on_mean_s / (w.on_mean_s + w.off_mean_s)
        rate = p_on * w.burst_rate_rps + (1 - p_on) * w.rate_rps
    else:
        rate = w.rate_rps

    mean_out = mean_output_tokens(w)
    tok = rate * mean_out + w.mega_prompt_rate_per_s * w.mega_prompt_output_tokens
    return rate + w.mega_prompt_rate_per_s, tok


def nominal_weighted_window_tokens(task: TaskSpec) -> float:
    """Tenant-weighted output tokens one control window offers on average (the grader's weights,
    the task's nominal rates; the denominator of the ``grade`` reward component)."""
    w = task.workload
    _, tok_s = nominal_rates(task)
    weights = [t.grade_weight for t in task.tenants]
    mega_tok_s = w.mega_prompt_rate_per_s * w.mega_prompt_output_tokens
    shares = list(w.tenant_shares)[:len(weights)] or [1.0]
    mean_w = sum(s * x for s, x in zip(shares, weights)) / sum(shares)
    mega_w = weights[w.mega_prompt_tenant] if 0 <= w.mega_prompt_tenant < len(weights) else 1.0
    return ((tok_s - mega_tok_s) * mean_w + mega_tok_s * mega_w) * task.window_s


class LLMServeEnv(CurriculumMixin, gym.Env):
    """Serving-configuration control of a simulated LLM-inference cluster.

    ## Description
    A discrete-event simulator (``inferencegym.sim.Cluster``) serves a task's workload on a fixed
    group of replicas. Every step the agent chooses the serving configuration for the next control
    window of ``task.window_s`` simulated seconds; the simulator then runs that window. Queues, KV
    memory, running batches and in-flight requests carry over from window to window, so a bad
    configuration now leaves a backlog (and latency) later.

    ## Action Space
    ``Dict`` (see :mod:`inferencegym.envs.actions`; a :class:`ServeAction` or a plain dict is
    accepted too; :class:`~inferencegym.envs.actions.FlatActionWrapper` gives a ``MultiDiscrete``):

    | key                    | space                | meaning                                          |
    |------------------------|----------------------|--------------------------------------------------|
    | batch_cap              | Discrete(512, start=1)| max running sequences per replica              |
    | kv_budget_fraction     | Box(0.1, 1.0, (1,))  | share of free GPU memory for the KV cache        |
    | speculation_depth      | Discrete(9)          | speculative draft tokens (0 = off)               |
    | quantization_tier      | Discrete(3)          | 0 FP16, 1 INT8, 2 INT4                           |
    | prefill_decode_split   | Discrete(2)          | 1: disaggregate (>= 2 replicas) / chunk prefills |
    | priority_routing       | Discrete(2)          | 1: priority requests jump queues                 |

    Switch costs are the simulator's (docs/techniques.md): a quantization change reloads the weights
    (the replica pauses for weight bytes / host-to-GPU bandwidth; requests keep their KV when it
    fits, else are preempted); turning disaggregation on or off lets requests in flight finish where
    they are while new ones follow the new mode; a lower KV budget preempts requests whose blocks no
    longer fit. Other knobs apply from the next scheduling iteration.

    ## Observation Space
    ``Box(0, inf, (24,), float32)``, features in :data:`OBS_FEATURES` order, each normalised to O(1)
    (latencies by the SLO, counts by ``task.ref_batch``, rates by the task's nominal load). A latency
    with no sample in the window reads 0. ``reset`` returns the empty cluster with the default
    configuration.

    ## Rewards
    A weighted sum of named per-window components (:mod:`inferencegym.envs.reward`): throughput
    relative to offered load, SLO attainment with an unbounded soft penalty past the SLO and a bonus
    well under it, KV occupancy kept in a 60-85 % band, preemptions, cost and quantization quality,
    and (``w_grade``, off by default) ``grade``: the grader split into windows, whose episode mean
    approximates the grade. Weights come from :class:`RewardConfig`; every component is in
    ``info["reward/<name>"]``. The grader (:func:`inferencegym.tasks.graders.grade`) is computed
    separately from the episode log and never from the reward.

    ## Episode End
    No termination; truncation after ``task.episode_windows`` steps. On the last step ``info`` holds
    ``grade/score`` and its breakdown; ``env.episode_log()`` returns the :class:`EpisodeLog`.

    ## Arguments
    ``gymnasium.make("InferenceGym/LLMServe-v0", task_id="static_workload", reward_config=None,
    episode_windows=None, privileged=False)``: ``task_id`` a registered single-agent task (or a
    :class:`TaskSpec`), ``reward_config`` a :class:`RewardConfig` (or dict of its fields),
    ``episode_windows`` overrides the episode length, ``privileged`` adds the ``oracle/*`` keys to
    ``info`` (off by default; only for privileged reference policies).

    ## Curriculum
    ``env.set_curriculum(load_scale=1.0, burst_scale=1.0)`` scales the intensity of the workload
    generated at the NEXT ``reset()`` (:meth:`TaskSpec.scaled`: arrival rate x load, burst rate x
    load x burst, mega-prompt rate x burst); the graders, SLOs, observation normalisation (nominal
    rates) and ``env.task`` keep the base task. ``env.curriculum`` reads the current scales; (1, 1)
    is exactly the unscaled env. The RLlib curriculum callback calls it on every env runner.

    ## Info
    ``sim/<raw>`` raw window figures (:data:`RAW_KEYS`), ``reward/<name>`` components, ``action``
    (the applied ServeAction as a dict) and ``grade/*`` on the last step. Only with
    ``privileged=True`` (set by the evaluation for privileged reference policies such as
    ``clairvoyant``, never by an agent's env, the HTTP server or RLlib): ``oracle/phase`` and
    ``oracle/next_*``, the hidden workload phase and the next window's arrivals.
    """

    metadata = {"render_modes": []}

    def __init__(self, task_id: str | TaskSpec = "static_workload", *,
                 reward_config: RewardConfig | dict | None = None,
                 episode_windows: int | None = None, render_mode: str | None = None,
                 privileged: bool = False):
        task = get_task(task_id)
        if task.kind != "single":
            raise ValueError(f"task {task.task_id!r} is a {task.kind!r} task; LLMServeEnv runs "
                             f"single-agent tasks: {', '.join(t.task_id for t in _single_tasks())}")
        if episode_windows is not None:
            if int(episode_windows) < 1:
                raise ValueError(f"episode_windows must be >= 1, got {episode_windows}")
            from dataclasses import replace
            task = replace(task, episode_windows=int(episode_windows))
        if reward_config is None:
            reward_config = RewardConfig()
        elif isinstance(reward_config, dict):
            reward_config = RewardConfig(**reward_config)
        elif not isinstance(reward_config, RewardConfig):
            raise TypeError(f"reward_config must be a RewardConfig or dict, got {type(reward_config).__name__}")
        if render_mode is not None:
            raise ValueError(f"LLMServeEnv has no render modes, got render_mode={render_mode!r}")
        if not isinstance(privileged, bool):
            raise TypeError(f"privileged must be True or False, got {privileged!r}")
        self.task = task
        self.reward_config = reward_config
        self.privileged = privileged
        """Whether ``info`` carries the ``oracle/*`` keys (the hidden future; reference policies only)."""
        self.render_mode = None
        self.action_space = action_space()
        self.observation_space = spaces.Box(0.0, np.inf, shape=(len(OBS_FEATURES),), dtype=np.float32)
        self._ttft_slo = min(t.ttft_slo_s for t in task.tenants)
        self._tbt_slo = min(t.tbt_slo_s for t in task.tenants)
        self._priority_names = [t.name for t in task.tenants if t.priority == 1]
        self._nominal_rate, self._nominal_tok = nominal_rates(task)
        self._tenant_weights = [t.grade_weight for t in task.tenants]
        self._nominal_weighted_tokens = nominal_weighted_window_tokens(task)
        self._cost_ref = task.grader.cost_good_usd_per_1k
        self._quality_ref = task.grader.quality_bad_delta
        self._cluster = None
        self._wl: EpisodeWorkload | None = None
        self._step = 0
        self._seed: int | None = None
        self._dumped: tuple = (None, None)
        self._setup_models()

    # ------------------------------------------------------------------------------------------
    def _setup_models(self) -> None:
        t = self.task
        self._quality = {}
        for tier in QUANTIZATION_TIERS:
            m = ExecutionModel.from_preset(model=t.model, gpu=t.gpu, tensor_parallel=t.tensor_parallel,
                                           quantization=tier.lower(), engine_profile=t.engine_profile)
            self._quality[tier] = float(m.quality_delta)
        g = get_gpu(t.gpu)
        self._gpu_mem_gb = _gpu_mem_gb(g) * t.tensor_parallel * t.replicas

    def _make_cluster(self, rng: np.random.Generator):
        a = ServeAction()  # the task's initial knobs (vLLM defaults) at reset
        return make_cluster(self.task, rng, priority_routing=a.priority_routing), a

    # ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._seed = seed
        # two independent streams derived from the env's np_random (seeded by super().reset)
        s_wl, s_sim = self.np_random.integers(0, 2**63 - 1, size=2)
        self._wl = generate_episode_workload(self.workload_task(), np.random.default_rng(int(s_wl)))
        self._cluster, self._action = self._make_cluster(np.random.default_rng(int(s_sim)))
        self._cluster.skip_tenant_tbt()  # (nothing here reads a tenant's TBT: not recorded)
        self._step = 0
        self._next_req_id = 0
        self._records: list[tuple] = []
        self._ttfts: list[float] = []
        self._tbt_max: list[float] = []
        self._e2es: list[float] = []
        self._produced_total = 0.0
        self._usd_total = 0.0
        raw = {k: 0.0 for k in RAW_KEYS}
        self._last_raw = raw
        obs = self._observation(raw)
        info = {f"sim/{k}": v for k, v in raw.items()}
        if self.privileged:
            info.update(self._oracle())
        info["action"] = self._action.model_dump()
        # how far to trust the simulated latencies: the engine profile's bands against measured
        # serving (TTFT / TPOT / E2E) and its per-iteration band (docs/calibration.md)
        err = self._cluster.base_model.calibration_error()
        info["calibration_error"] = {"engine_profile": err["engine_profile"], "serving": err["serving"],
                                     "engine": err["engine"]}
        return obs, info

    def _oracle(self) -> dict[str, Any]:
        wl, w = self._wl, self._step
        if w >= self.task.episode_windows:
            return {"oracle/phase": -1, "oracle/phase_name": "end", "oracle/next_arrivals": 0,
                    "oracle/next_offered_tokens": 0.0, "oracle/next_mega_prompts": 0,
                    "oracle/next_mean_prompt_tokens": 0.0}
        lo, hi = wl.window_start_idx[w], wl.window_start_idx[w + 1]
        return {
            "oracle/phase": int(wl.phase[w]),
            "oracle/phase_name": wl.phase_names[int(wl.phase[w])],
            "oracle/next_arrivals": int(hi - lo),
            "oracle/next_offered_tokens": float(wl.output_tokens[lo:hi].sum()),
            "oracle/next_mega_prompts": int(wl.mega[lo:hi].sum()),
            "oracle/next_mean_prompt_tokens": float(wl.prompt_tokens[lo:hi].mean()) if hi > lo else 0.0,
        }

    # ------------------------------------------------------------------------------------------
    def _apply(self, a: ServeAction) -> None:
        c, prev, t = self._cluster, self._action, self.task
        # the whole knob set goes to the simulator, which applies what differs (the one knob diff)
        kw: dict[str, Any] = a.replica_knobs()
        if a.prefill_decode_split != prev.prefill_decode_split and not t.split_disaggregates:
            kw["scheduler"] = "sarathi" if a.prefill_decode_split else "vllm"
        c.apply_replica_config(None, **kw)
        if a.priority_routing != prev.priority_routing:
            c.set_priority_routing(a.priority_routing)
        if a.prefill_decode_split != prev.prefill_decode_split and t.split_disaggregates:
            c.set_disaggregation(a.prefill_decode_split, prefill_replicas=t.prefill_replicas)
        self._action = a

    def step(self, action: Any):
        if self._cluster is None:
            raise RuntimeError("call reset() before step()")
        if self._step >= self.task.episode_windows:
            raise RuntimeError(f"episode is over ({self.task.episode_windows} steps); call reset()")
        a = ServeAction.from_any(action)  # raises InvalidActionError before any state change
        self._apply(a)

        t, wl, w = self.task, self._wl, self._step
        lo, hi = int(wl.window_start_idx[w]), int(wl.window_start_idx[w + 1])
        if hi > lo:
            reqs = requests_from_workload(wl, lo, hi, first_id=self._next_req_id)
            self._next_req_id += hi - lo
            self._cluster.submit(reqs)
        end = (w + 1) * t.window_s
        self._cluster.run_until(end)
        stats = self._cluster.window_stats(reset=True, brief=True)  # (only what _window_figures reads)
        self._step = w + 1
        raw, offered_t, good_t = self._window_figures(stats, lo, hi)
        g_term = grade_term(good_tokens=good_t, tenant_weights=self._tenant_weights,
                            nominal_weighted_tokens=self._nominal_weighted_tokens,
                            window_usd=raw["window_usd"], quality_delta=raw["quality_delta"],
                            grader=t.grader,
                            served_share=raw["produced_tokens"] / max(self._nominal_tok * t.window_s, 1e-9),
                            ) if self.reward_config.w_grade else 0.0
        comps = reward_components(raw, cost_ref_usd_per_1k=self._cost_ref,
                                  quality_ref_delta=self._quality_ref, config=self.reward_config,
                                  grade=g_term)
        reward = total_reward(comps, self.reward_config)
        self._records.append((w, offered_t, good_t, raw["produced_tokens"], raw["window_usd"],
                              raw["quality_delta"]))
        self._last_raw = raw
        obs = self._observation(raw)
        keys = _SIM_INFO_KEYS
        info: dict[str, Any] = {keys.get(k) or f"sim/{k}": v for k, v in raw.items()}
        keys = _REWARD_INFO_KEYS
        for k, v in comps.items():
            info[keys.get(k) or f"reward/{k}"] = v
        info["reward/total"] = reward
        if self.privileged:
            info.update(self._oracle())
        if a is not self._dumped[0]:  # (a policy that keeps its action object: dumped once)
            self._dumped = (a, a.model_dump())
        info["action"] = dict(self._dumped[1])
        truncated = self._step >= t.episode_windows
        if truncated:
            g = self.grade()
            info.update(g.breakdown())
        return obs, float(reward), False, truncated, info

    # ------------------------------------------------------------------------------------------
    def _window_figures(self, stats, lo: int, hi: int) -> tuple[dict[str, float], list[float], list[float]]:
        t, wl = self.task, self._wl
        n_t = len(t.tenants)
        offered = [0.0] * n_t
        if hi > lo:  # np.bincount(tenant, weights=output, minlength=n_t): float sums in row order
            ten = wl.tenant[lo:hi].tolist()
            if min(ten) >= 0 and max(ten) < n_t:
                for ti, o in zip(ten, wl.output_tokens[lo:hi].tolist()):
                    offered[ti] += float(o)
            else:
                offered = np.bincount(wl.tenant[lo:hi], weights=wl.output_tokens[lo:hi], minlength=n_t).tolist()
        good = [0.0] * n_t
        done, ok = self._cluster.closed_window_completions()  # the simulator's completions and SLO
        for r, met in zip(done, ok):
            if met:
                good[r.tenant] += r.output_tokens
            self._ttfts.append(r.first_token_s - r.arrival_s)
            self._tbt_max.append(r.tbt_max_s)
            self._e2es.append(r.completion_s - r.arrival_s)
        w_s = t.window_s
        produced = float(stats.output_tokens)
        usd = float(stats.cost_usd)
        self._produced_total += produced
        self._usd_total += usd
        n_arr = hi - lo
        ttft, tbt = stats.ttft_s, stats.tbt_s
        completions = stats.completions
        raw = {
            "queue_depth": float(stats.queue_depth),
            "running": float(stats.running),
            "kv_occupancy": _f(stats.kv_occupancy_mean),
            "mean_prompt_tokens": _int_mean(wl.prompt_tokens[lo:hi]) if n_arr else 0.0,
            "median_prompt_tokens": _int_median(wl.prompt_tokens[lo:hi]) if n_arr else 0.0,
            "ttft_p50_s": _f(ttft["p50"]),
            "ttft_p99_s": _f(ttft["p99"]),
            "itl_p50_s": _f(tbt["p50"]),
            "tbt_p99_s": _f(tbt["p99"]),
            "throughput_tok_s": produced / w_s,
            "slo_compliance": _f(stats.slo_attainment) if completions else 1.0,
            "gpu_mem_used_frac": float(stats.gpu_memory_used_gb) / self._gpu_mem_gb,
            "cost_per_1k_tokens": usd / max(produced, 1.0) * 1000.0,
            "arrival_rate_rps": n_arr / w_s,
            "spec_acceptance": _f(stats.spec_acceptance_rate),
            "preemptions": float(stats.preemptions),
            "completions": float(completions),
            "arrivals": float(n_arr),
            "first_tokens": 0.0 if ttft["p50"] != ttft["p50"] else 1.0,
            "tbt_samples": 0.0 if tbt["p50"] != tbt["p50"] else 1.0,
            "offered_tokens": float(sum(offered)),
            "produced_tokens": produced,
            "window_usd": usd,
            "quality_delta": float(stats.quality_delta) if produced > 0 else
            self._quality[self._action.quantization_tier],
            "priority_slo_compliance": 1.0,
            "rejections": float(stats.rejections),
            "ttft_slo_s": self._ttft_slo,
            "tbt_slo_s": self._tbt_slo,
        }
        if self._priority_names:
            att = []
            for name in self._priority_names:
                ts = stats.tenants.get(name)
                if ts is not None and ts.completions > 0 and ts.slo_attainment == ts.slo_attainment:
                    att.append(ts.slo_attainment)
            raw["priority_slo_compliance"] = float(sum(att) / len(att)) if att else 1.0
        else:
            raw["priority_slo_compliance"] = raw["slo_compliance"]
        return raw, offered, good

    def _observation(self, raw: dict[str, float]) -> np.ndarray:
        t, a = self.task, self._action
        rb = t.ref_batch
        obs = np.array([
            raw["queue_depth"] / rb,
            raw["running"] / rb,
            raw["kv_occupancy"],
            raw["mean_prompt_tokens"] / 1000.0,
            raw["ttft_p50_s"] / self._ttft_slo,
            raw["ttft_p99_s"] / self._ttft_slo,
            raw["itl_p50_s"] / self._tbt_slo,
            raw["throughput_tok_s"] / self._nominal_tok,
            raw["slo_compliance"],
            raw["gpu_mem_used_frac"],
            raw["cost_per_1k_tokens"] / self._cost_ref,
            raw["arrival_rate_rps"] / self._nominal_rate,
            raw["spec_acceptance"],
            raw["preemptions"] / rb,
            self._step / t.episode_windows,
            raw["tbt_p99_s"] / self._tbt_slo,
            raw["priority_slo_compliance"],
            a.batch_cap / BATCH_CAP_MAX,
            a.kv_budget_fraction,
            a.speculation_depth / SPECULATION_MAX,
            a.quantization_index / 2.0,
            float(a.prefill_decode_split),
            float(a.priority_routing),
            raw["median_prompt_tokens"] / 1000.0,
        ], dtype=np.float32)
        return obs

    # ------------------------------------------------------------------------------------------
    def episode_log(self, policy: str | None = None) -> EpisodeLog:
        """The JSON-serialisable log of the episode so far (what :func:`grade` scores)."""
        if self._wl is None:
            raise RuntimeError("call reset() before episode_log()")
        windows = [WindowRecord(step=w, offered_tokens=o, good_tokens=g, produced_tokens=p,
                                window_usd=u, quality_delta=q) for (w, o, g, p, u, q) in self._records]
        return EpisodeLog(task_id=self.task.task_id, seed=self._seed, policy=policy, windows=windows,
                          metrics=self.episode_metrics())

    def episode_metrics(self) -> dict[str, float | None]:
        """p99 TTFT / largest-token-gap / E2E over completed requests (None when none completed),
        throughput and cost so far."""
        elapsed = max(self._step * self.task.window_s, 1e-9)

        def p99(x: list[float]) -> float | None:
            return float(np.percentile(x, 99)) if x else None

        return {
            "ttft_p99_s": p99(self._ttfts),
            "tbt_p99_s": p99(self._tbt_max),
            "e2e_p99_s": p99(self._e2es),
            "throughput_tok_s": self._produced_total / elapsed,
            "cost_per_1k_tokens": self._usd_total / max(self._produced_total, 1.0) * 1000.0,
            "completed_requests": float(len(self._e2es)),
            "offered_requests": float(self._next_req_id),
        }

    def grade(self) -> GradeResult:
        """Grade of the episode so far (the final grade after the last step)."""
        return grade(self.task, self.episode_log())

    @property
    def cluster(self):
        """The underlying simulator (read-only use: metrics, per-request results). It records no
        per-tenant TBT samples (``Cluster.skip_tenant_tbt``: the env never reads them), so its
        ``window_stats`` give every tenant's ``tbt_s`` as NaN."""
        return self._cluster


def _single_tasks():
    return list_tasks(kind="single")


__all__ = ["LLMServeEnv", "OBS_FEATURES", "RAW_KEYS", "InvalidActionError", "nominal_rates"]


def _int_mean(a: np.ndarray) -> float:
    """``float(a.mean())`` of a short integer array without numpy's reduction set-up: the integer
    sum is exact in any order (below 2**53), then one division, as numpy does it."""
    if a.dtype.kind not in "iu":
        return float(a.mean())
    return float(sum(a.tolist())) / a.size


def _int_median(a: np.ndarray) -> float:
    """``float(np.median(a))`` of a short integer array: the middle value, or the two middle
    values' sum (exact) halved, as numpy computes it."""
    if a.dtype.kind not in "iu":
        return float(np.median(a))
    v = sorted(a.tolist())
    m = len(v) // 2
    return float(v[m]) if len(v) % 2 else float(v[m - 1] + v[m]) / 2.0

