"""The cluster environment: an RLlib ``MultiAgentEnv`` with a global router and one agent per replica.

``ClusterEnv(config)`` runs one cluster task (:mod:`inferencegym.envs.cluster_tasks`) on the shared
simulator (:class:`inferencegym.sim.Cluster` with ``router="external"``).

**Agents**: ``"router"`` and ``"replica_0"`` .. ``"replica_{N-1}"`` (N = the task's replicas, 2..64).
Agents act at different times and :meth:`step` returns observations only for the agents that act
next:

- the **router** acts at every request arrival (one decision per request: the simulator pauses at
  each arrival, and per-request dispatch is what production routers do; batching arrivals would
  delay every request by the batching interval and make the action space combinatorial);
- the **replica agents** all act together at every control-window boundary (``TaskSpec.window_s``
  of simulated time); their knobs apply to the next window.

**Router observation** (``Dict``):

- ``"replicas"``: Box (N, F) float32, one row per replica, columns :data:`ROUTER_FEATURES`:
  queue length / ``ref_batch``; age of the oldest waiting request / TTFT SLO; mean wait of the
  waiting requests / TTFT SLO; running batch / batch cap; KV occupancy (0..1); recent p90 TTFT / TTFT
  SLO; recent p90 TBT / TBT SLO; load trend (queue length minus its moving average) / ``ref_batch``;
  outstanding requests / (replica capacity x TTFT SLO) (a load by capacity: roughly the queueing
  delay in SLOs); relative speed (replica capacity / mean replica capacity); prompt fits (1 if the
  arriving prompt fits in the replica's KV cache); estimated time to the arriving request's first
  token on the replica / TTFT SLO (:mod:`inferencegym.sim.estimates`: queue positions, batch cap,
  prefill work ahead and the replica's iteration time, every request's remaining output taken as the
  task's mean output length; what the ``estimated_ttft`` router minimises). Values are clipped to
  [-100, 100] (stated clip).
- ``"request"``: Box (5,) float32: prompt tokens / 4096, log1p(prompt) / log1p(32768), tenant
  one-hot (2 slots; tasks have at most 2 tenants), priority.
- ``"action_mask"``: Box (N,) float32 in {0, 1}: 1 for replicas that are up and can admit the
  prompt (its KV cache can hold it). A masked choice raises ``ValueError``.

**Router action**: ``Discrete(N)``, the replica for the arriving request.

**Replica observation**: Box (2F + 6,) float32: the replica's own router-feature row, the cluster mean
of every feature, its current knobs as bucket indices / (buckets - 1) (4 values), and its last
window's local throughput and SLO attainment.

**Replica action**: ``MultiDiscrete([5, 4, 3, 4])``: indices into :data:`BATCH_CAP_BUCKETS`,
:data:`KV_FRACTION_BUCKETS`, :data:`SPECULATION_BUCKETS` and :data:`CHUNK_BUCKETS` of
``cluster_tasks``. A replica agent missing from the action dict keeps its knobs.

**Rewards** (every component in ``info[agent]["reward/<name>"]``; weights in
:class:`ClusterRewardConfig`):

- router, given at each of its decisions for the interval since its previous decision
  (Decima-style: the sum over an episode is minus the tenant-weighted total time requests spend in
  the system, so each decision is charged exactly the delay that accrues until the next one):
  ``queue = -(integral over (t_prev, t] of sum over requests in the system of tenant weight) /
  sojourn_ref_s``; ``slo = sum over requests whose first token came in (t_prev, t] of tenant weight x
  latency_term(TTFT / TTFT SLO)`` (``inferencegym.envs.reward.latency_term``: a bonus under the SLO,
  ``-ln`` past it, unbounded); ``reject = -`` tenant-weighted requests rejected in the interval.
- replica i, at each window end: ``throughput`` = output tokens it produced in the window / (its
  capacity x mean output length x window); ``slo`` = mean latency_term of TTFT / SLO over its first
  tokens in the window (0 if none) plus the same on p99 TBT; ``preemption`` = -preemptions /
  max(1, its requests); ``shared`` = the cluster-wide ``slo`` of the window (the same for all
  replicas: the cooperative term).

**Episode**: ``TaskSpec.episode_windows`` windows; ends with ``truncateds["__all__"] = True`` (time
limit; the workload continues conceptually). The final step returns observations for every agent.
:meth:`episode_log` drains the in-flight requests and builds the grader's log.

**Arguments** (``config`` dict): ``task_id`` (default ``"cluster_routing"``), ``num_replicas``
(2..64, default the task's), ``reward`` (dict of :class:`ClusterRewardConfig` fields),
``episode_windows`` (override), ``seed`` (default seed of the first reset when none is given).

**Curriculum**: ``env.set_curriculum(load_scale=1.0, burst_scale=1.0)`` scales the requests generated
at the NEXT ``reset()`` (:meth:`TaskSpec.scaled` of the resized task, whose rates come from
``load_fraction`` x capacity: arrival rate x load, ON-burst rate x load x burst, mega-prompt rate x
burst). Observations, rewards, SLOs, the grader and ``env.task`` keep the base task; ``env.curriculum``
reads the current scales; (1, 1) is exactly the unscaled env. Bad scales raise ValueError and change
nothing.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from inferencegym.envs.cluster_tasks import (BATCH_CAP_BUCKETS, CHUNK_BUCKETS, KV_FRACTION_BUCKETS,
                                             SPECULATION_BUCKETS, cluster_task, replica_capacity_rps,
                                             replica_hardware)  # noqa: F401
from inferencegym.envs.curriculum import CurriculumMixin
from inferencegym.envs.reward import latency_term
from inferencegym.envs.tasks import TaskSpec

ROUTER_FEATURES: tuple[str, ...] = (
    "queue_len", "oldest_wait", "mean_wait", "running", "kv_occupancy", "p90_ttft", "p90_tbt",
    "load_trend", "load_by_capacity", "relative_speed", "prompt_fits", "est_ttft")
"""Columns of the router's ``"replicas"`` matrix (see the module docstring for the normalisation)."""
REQUEST_FEATURES: tuple[str, ...] = ("prompt_norm", "prompt_log", "tenant_0", "tenant_1", "priority")
"""Entries of the router's ``"request"`` vector."""
MAX_TENANTS = 2
FEATURE_CLIP = 100.0
REPLICA_ACTION_NVEC: tuple[int, ...] = (len(BATCH_CAP_BUCKETS), len(KV_FRACTION_BUCKETS),
                                        len(SPECULATION_BUCKETS), len(CHUNK_BUCKETS))
ROUTER = "router"
_SIM_COLS = {name: i for i, name in enumerate(("queue_len", "oldest_wait_s", "mean_wait_s", "running",
                                               "kv_occupancy", "recent_p90_ttft_s",
                                               "recent_p90_tbt_s", "load_trend"))}
"""Columns of ``Cluster.replica_features()`` (checked against ``Cluster.FEATURE_NAMES`` at import)."""


@dataclass(frozen=True, kw_only=True)
class ClusterRewardConfig:
    """Weights of the cluster env's reward components (see the module docstring)."""

    w_queue: float = 1.0
    """Router: weight of the Decima term (integral of weighted requests in the system)."""
    w_router_slo: float = 0.5
    """Router: weight of the TTFT latency terms of first tokens in the interval."""
    w_reject: float = 1.0
    """Router: weight of rejected requests."""
    w_throughput: float = 1.0
    """Replica: weight of local throughput."""
    w_replica_slo: float = 1.0
    """Replica: weight of local SLO terms."""
    w_preemption: float = 0.2
    """Replica: weight of local preemptions."""
    w_shared: float = 0.5
    """Replica: weight of the shared cluster SLO term."""
    slo_bonus: float = 0.25
    """Largest bonus of one latency term well under its SLO (``latency_term``)."""
    sojourn_ref_s: float = 10.0
    """Normaliser of the Decima term: a typical request sojourn (s)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------------
# Simulator adapters (the only place that builds sim objects).

def _tenant_specs(task: TaskSpec):
    from inferencegym.sim import TenantSpec

    return tuple(TenantSpec(name=t.name, priority=t.priority, ttft_slo_s=t.ttft_slo_s,
                            tbt_slo_s=t.tbt_slo_s, spec_acceptance=t.spec_acceptance)
                 for t in task.tenants)


def _replica_configs(task: TaskSpec) -> list:
    from inferencegym.sim import ReplicaConfig

    o = dict(task.options)
    return [ReplicaConfig(model=task.model, gpu=gpu, tensor_parallel=int(tp),
                          engine_profile=task.engine_profile,
                          scheduler=o.get("scheduler", "sarathi"),
                          batch_cap=int(o.get("batch_cap", 128)),
                          kv_budget_fraction=float(o.get("kv_budget_fraction", 0.9)),
                          chunk_size=int(o.get("chunk_size", 512)),
                          speculation_depth=int(o.get("speculation_depth", 0)))
            for gpu, tp in replica_hardware(task)]


def _make_cluster(task: TaskSpec, rng: np.random.Generator, router: str = "external"):
    from inferencegym.sim import Cluster, ClusterConfig

    reps = _replica_configs(task)
    kw = {"replica_configs": tuple(reps)} if any(r != reps[0] for r in reps) else {}
    cfg = ClusterConfig(replica=reps[0], num_replicas=len(reps), router=router,
                        tenants=_tenant_specs(task), **kw)
    return Cluster(cfg, rng=rng)


def _kv_capacity_tokens(cluster) -> np.ndarray:
    """KV-cache capacity of every replica in tokens."""
    return np.array([rep.kv.capacity_blocks * rep.kv.block_size for rep in cluster.replicas],
                    dtype=np.float64)


def _build_requests(task: TaskSpec, duration_s: float, rng: np.random.Generator) -> list:
    """The episode's requests (the single-agent env's workload generator, on the task's spec)."""
    from inferencegym.envs.episode_workload import generate_episode_workload
    from inferencegym.sim import Request

    windows = max(1, int(math.ceil(duration_s / task.window_s)))
    t = dataclasses.replace(task, episode_windows=windows)
    w = generate_episode_workload(t, rng)
    a, p, o, ten, pr = (w.arrival_s.tolist(), w.prompt_tokens.tolist(), w.output_tokens.tolist(),
                        w.tenant.tolist(), w.priority.tolist())
    return [Request(req_id=i, arrival_s=a[i], prompt_tokens=p[i], output_tokens=o[i], tenant=ten[i],
                    priority=pr[i]) for i in range(len(a)) if a[i] <= duration_s]


# ------------------------------------------------------------------------------------------------

class ClusterEnv(CurriculumMixin, MultiAgentEnv):
    """Global router + one agent per replica over the shared simulator (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, config: dict | None = None):
        super().__init__()
        config = dict(config or {})
        known = {"task_id", "num_replicas", "reward", "episode_windows", "seed"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"unknown ClusterEnv config keys {unknown}; valid: {sorted(known)}")
        task = cluster_task(config.get("task_id", "cluster_routing"), config.get("num_replicas"))
        if config.get("episode_windows") is not None:
            ew = int(config["episode_windows"])
            if ew < 1:
                raise ValueError(f"episode_windows must be >= 1; got {config['episode_windows']}")
            task = dataclasses.replace(task, episode_windows=ew)
        if len(task.tenants) > MAX_TENANTS:
            raise ValueError(f"ClusterEnv supports at most {MAX_TENANTS} tenants; task "
                             f"{task.task_id!r} has {len(task.tenants)}")
        self.task: TaskSpec = task
        rw = config.get("reward") or {}
        if isinstance(rw, ClusterRewardConfig):
            self.reward_config = rw
        else:
            valid = {f.name for f in dataclasses.fields(ClusterRewardConfig)}
            bad = sorted(set(rw) - valid)
            if bad:
                raise ValueError(f"unknown reward keys {bad}; valid: {sorted(valid)}")
            self.reward_config = ClusterRewardConfig(**rw)
        self._default_seed = config.get("seed")
        self.n = n = task.replicas
        self.replica_ids = [f"replica_{i}" for i in range(n)]
        self.possible_agents = [ROUTER, *self.replica_ids]
        self.agents = list(self.possible_agents)
        F = len(ROUTER_FEATURES)
        self._router_space = spaces.Dict({
            "replicas": spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (n, F), np.float32),
            "request": spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (len(REQUEST_FEATURES),), np.float32),
            "action_mask": spaces.Box(0.0, 1.0, (n,), np.float32),
        })
        self._replica_obs_dim = 2 * F + 6
        rep_space = spaces.Box(-FEATURE_CLIP, FEATURE_CLIP, (self._replica_obs_dim,), np.float32)
        rep_act = spaces.MultiDiscrete(list(REPLICA_ACTION_NVEC))
        self.observation_spaces = {ROUTER: self._router_space, **{r: rep_space for r in self.replica_ids}}
        self.action_spaces = {ROUTER: spaces.Discrete(n), **{r: rep_act for r in self.replica_ids}}
        # static per-replica figures
        cap = np.asarray(replica_capacity_rps(task), dtype=np.float64)
        self._cap_rps = cap
        self._rel_speed = cap / cap.mean()
        self._ttft_slo = np.array([t.ttft_slo_s for t in task.tenants], dtype=np.float64)
        self._tbt_slo = np.array([t.tbt_slo_s for t in task.tenants], dtype=np.float64)
        self._tenant_w = [float(t.grade_weight) for t in task.tenants]
        self._ttft_ref = float(self._ttft_slo.min())
        self._tbt_ref = float(self._tbt_slo.min())
        self._ref_batch = float(task.ref_batch)
        from inferencegym.envs.episode_workload import mean_output_tokens

        self._expected_out = mean_output_tokens(task.workload)
        self._iter_s_cache: dict[tuple[int, int], float] = {}
        self._mean_out = 129.0  # output-length normaliser of the replicas' throughput (Azure conv median)
        self.cluster = None
        self._pending = None
        from inferencegym.sim import Cluster

        names = tuple(getattr(Cluster, "FEATURE_NAMES", ()))
        if names[:len(_SIM_COLS)] != tuple(_SIM_COLS):
            raise RuntimeError(f"Cluster.FEATURE_NAMES {names} no longer matches the columns the "
                               f"cluster env reads {tuple(_SIM_COLS)}; update _SIM_COLS")

    # --------------------------------------------------------------------------------- API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is None:
            seed = self._default_seed
        super().reset(seed=seed, options=options)
        ss = np.random.SeedSequence(seed) if seed is not None else np.random.SeedSequence()
        wl_ss, sim_ss, pol_ss = ss.spawn(3)
        self.np_random = np.random.default_rng(pol_ss)
        task = self.task
        self._episode_s = task.episode_s
        self.requests = _build_requests(self.workload_task(), self._episode_s,
                                        np.random.default_rng(wl_ss))
        self.cluster = _make_cluster(task, np.random.default_rng(sim_ss))
        self.cluster.submit(self.requests)
        o = dict(task.options)
        self._knobs = np.zeros((self.n, 4), dtype=np.int64)
        self._knobs[:] = [_bucket(BATCH_CAP_BUCKETS, o.get("batch_cap", 128)),
                          _bucket(KV_FRACTION_BUCKETS, o.get("kv_budget_fraction", 0.9)),
                          _bucket(SPECULATION_BUCKETS, o.get("speculation_depth", 0)),
                          _bucket(CHUNK_BUCKETS, o.get("chunk_size", 512))]
        self._batch_cap = np.array([BATCH_CAP_BUCKETS[k] for k in self._knobs[:, 0]], np.float64)
        self._update_scale()
        self._feat_buf = np.zeros((self.n, len(ROUTER_FEATURES)))
        self._feat_buf[:, 9] = self._rel_speed
        self._inv_cap_slo = 1.0 / (self._cap_rps * self._ttft_ref)
        self._kv_cap_tokens = _kv_capacity_tokens(self.cluster)
        self._up = np.ones(self.n, dtype=bool)
        # bookkeeping
        self._window = 0
        self._next_window_s = task.window_s
        self._last_decision_s = 0.0
        self._active: list = []            # dispatched, not finished
        self._awaiting_first: list = []    # dispatched, no first token yet
        self._active_w = 0.0               # sum of tenant weights of the active requests
        self._queue_ema = np.zeros(self.n)
        self._win = _WindowAcc(self.n)
        self.decisions = 0
        self._router_reward_acc = {"queue": 0.0, "slo": 0.0, "reject": 0.0}
        self._done = False
        return self._advance(first=True)

    def step(self, action_dict: dict):
        if self.cluster is None:
            raise RuntimeError("ClusterEnv.step() called before reset()")
        if self._done:
            raise RuntimeError("ClusterEnv.step() called after the episode ended; call reset()")
        if not isinstance(action_dict, dict):
            raise ValueError(f"action_dict must be a dict keyed by agent id, got {type(action_dict).__name__}")
        bad = sorted(set(action_dict) - set(self.possible_agents))
        if bad:
            raise ValueError(f"unknown agent ids {bad}; valid: router, replica_0..replica_{self.n - 1}")
        if self._pending is not None:
            if ROUTER not in action_dict:
                raise ValueError("the router must act: a request is waiting for a replica "
                                 f"(action_dict has {sorted(action_dict)})")
            a = _as_int(action_dict[ROUTER], "router action")
            if not 0 <= a < self.n:
                raise ValueError(f"router action must be a replica index in 0..{self.n - 1}; got {a}")
            if self._mask[a] < 0.5:
                valid = np.flatnonzero(self._mask > 0.5).tolist()
                raise ValueError(f"router chose replica {a}, which is masked out (down or cannot admit "
                                 f"a {self._pending.prompt_tokens}-token prompt); valid now: {valid}")
            self._dispatch(self._pending, a)
            self._pending = None
            self.decisions += 1
        elif self._expect_replicas:
            # validate every replica action first: nothing changes if one is bad
            parsed = {}
            for rid, act in action_dict.items():
                if rid == ROUTER:
                    raise ValueError("the router has no request to route now (replica agents act at "
                                     "window boundaries); drop 'router' from the action dict")
                parsed[int(rid.split("_")[1])] = _parse_replica_action(act, rid)
            for i, k in parsed.items():
                self._apply_knobs(i, k)
        return self._advance()

    # --------------------------------------------------------------------------------- internals
    def _dispatch(self, req, replica: int) -> None:
        self.cluster.dispatch(req, replica)
        self._active.append(req)
        self._awaiting_first.append(req)
        self._active_w += self._tenant_w[req.tenant]
        self._win.dispatched[replica] += 1

    def _apply_knobs(self, i: int, k: np.ndarray) -> None:
        if np.array_equal(self._knobs[i], k):
            return
        self.cluster.apply_replica_config(
            replica=i, batch_cap=BATCH_CAP_BUCKETS[k[0]], kv_budget_fraction=KV_FRACTION_BUCKETS[k[1]],
            speculation_depth=SPECULATION_BUCKETS[k[2]], chunk_size=CHUNK_BUCKETS[k[3]])
        self._knobs[i] = k
        self._batch_cap[i] = BATCH_CAP_BUCKETS[k[0]]
        self._update_scale()
        self._kv_cap_tokens = _kv_capacity_tokens(self.cluster)

    def _sweep(self, now: float) -> None:
        """Charge the interval (last decision, now] to the router: Decima integral, first tokens,
        completions and rejections (exact: every request's own timestamps)."""
        t0 = self._last_decision_s
        w = self._tenant_w
        area = 0.0
        keep = []
        win = self._win
        for r in self._active:
            c = r.completion_s
            if c == c:  # completed (not NaN)
                area += w[r.tenant] * (c - t0)
                self._active_w -= w[r.tenant]
                win.completed_tokens[r.replica_id] += r.output_tokens
            elif r.rejected_reason is not None:
                self._active_w -= w[r.tenant]
                self._router_reward_acc["reject"] -= w[r.tenant]
            else:
                keep.append(r)
        area += self._active_w * (now - t0)
        self._active = keep
        slo = 0.0
        keep = []
        bonus = self.reward_config.slo_bonus
        for r in self._awaiting_first:
            ft = r.first_token_s
            if ft == ft:
                ratio = (ft - r.arrival_s) / self._ttft_slo[r.tenant]
                term = latency_term(ratio, bonus)
                slo += w[r.tenant] * term
                win.first_tokens[r.replica_id] += 1
                win.slo_sum[r.replica_id] += term
                win.slo_ok[r.replica_id] += ratio <= 1.0
            elif r.rejected_reason is None:
                keep.append(r)
        self._awaiting_first = keep
        acc = self._router_reward_acc
        acc["queue"] -= area / self.reward_config.sojourn_ref_s
        acc["slo"] += slo
        self._last_decision_s = now

    def _features(self, req) -> np.ndarray:
        f = self.cluster.replica_features()
        out = self._feat_buf
        # columns 0-6: the simulator's features times their normalisers (one vectorised op)
        np.multiply(f[:, :7], self._scale, out=out[:, :7])
        q = f[:, 0]
        out[:, 7] = (q - self._queue_ema) / self._ref_batch
        out[:, 8] = (q + f[:, 3]) * self._inv_cap_slo
        fits = self._kv_cap_tokens >= (req.prompt_tokens + 1 if req is not None else 0)
        out[:, 10] = fits
        if req is not None:
            out[:, 11] = self._est_ttft(req.prompt_tokens)
        else:
            out[:, 11] = 0.0
        self._queue_ema += 0.05 * (q - self._queue_ema)
        np.clip(out, -FEATURE_CLIP, FEATURE_CLIP, out=out)
        self._last_raw = f
        self._fits = fits
        return out.astype(np.float32)

    def _est_ttft(self, prompt_tokens: int) -> np.ndarray:
        """Estimated first-token time of the arriving request on every replica / TTFT SLO
        (:mod:`inferencegym.sim.estimates`, remaining outputs at the task's mean output length)."""
        from inferencegym.sim.estimates import decode_iteration_s, first_token_iterations

        est = np.empty(self.n)
        cache = self._iter_s_cache
        for i, rep in enumerate(self.cluster.replicas):
            key = (i, rep.cfg.batch_cap)
            it = cache.get(key)
            if it is None:
                it = cache[key] = decode_iteration_s(rep)
            est[i] = first_token_iterations(rep, prompt_tokens,
                                            expected_output_tokens=self._expected_out) * it
        return est / self._ttft_ref

    def _update_scale(self) -> None:
        """Normalisers of the simulator's feature columns (the batch cap is per replica)."""
        sc = np.empty((self.n, 7))
        sc[:, 0] = 1.0 / self._ref_batch
        sc[:, 1] = sc[:, 2] = sc[:, 5] = 1.0 / self._ttft_ref
        sc[:, 3] = 1.0 / self._batch_cap
        sc[:, 4] = 1.0
        sc[:, 6] = 1.0 / self._tbt_ref
        self._scale = sc

    def _router_obs(self, req) -> dict:
        feats = self._features(req)
        mask = (self._fits & self._up).astype(np.float32)
        self._mask = mask
        rq = np.zeros(len(REQUEST_FEATURES), dtype=np.float32)
        if req is not None:
            rq[0] = min(req.prompt_tokens / 4096.0, FEATURE_CLIP)
            rq[1] = math.log1p(req.prompt_tokens) / math.log1p(32768.0)
            rq[2 + min(req.tenant, MAX_TENANTS - 1)] = 1.0
            rq[4] = req.priority
        return {"replicas": feats, "request": rq, "action_mask": mask}

    def _router_info(self, req) -> dict:
        f = self._last_raw
        acc = self._router_reward_acc
        info = {"t_s": self.cluster.now_s, "decision": self.decisions,
                "reward/queue": acc["queue"], "reward/slo": acc["slo"], "reward/reject": acc["reject"],
                "outstanding_requests": f[:, 0] + f[:, 3], "kv_occupancy": f[:, 4]}
        if req is not None:
            info["request_prompt_tokens"] = req.prompt_tokens
            info["request_tenant"] = req.tenant
        return info

    @property
    def pending_request(self):
        """The request waiting for the router's decision (None at window boundaries)."""
        return self._pending

    def _router_reward(self) -> float:
        acc = self._router_reward_acc
        c = self.reward_config
        r = c.w_queue * acc["queue"] + c.w_router_slo * acc["slo"] + c.w_reject * acc["reject"]
        return float(r)

    def _reset_router_acc(self) -> None:
        self._router_reward_acc = {"queue": 0.0, "slo": 0.0, "reject": 0.0}

    def _window_end(self) -> tuple[dict, dict, dict]:
        """Observations, rewards and infos of the replica agents at a window boundary."""
        now = self.cluster.now_s
        self._sweep(now)
        feats = self._features(None)
        win = self._win
        produced = win.produced_tokens(self._active)
        c = self.reward_config
        cap_tok = self._cap_rps * self._mean_out * self.task.window_s
        thr = produced / cap_tok
        has = win.first_tokens > 0
        local_slo = np.where(has, win.slo_sum / np.maximum(win.first_tokens, 1), 0.0)
        attain = np.where(has, win.slo_ok / np.maximum(win.first_tokens, 1), 1.0)
        tot_first = win.first_tokens.sum()
        shared = float(win.slo_sum.sum() / tot_first) if tot_first > 0 else 0.0
        preempt = win.preemptions(self._active)
        n_req = np.maximum(1, win.dispatched + np.bincount(
            [r.replica_id for r in self._active], minlength=self.n))
        preempt_term = -preempt / n_req
        mean_feats = feats.mean(axis=0)
        obs, rew, info = {}, {}, {}
        knobs_norm = self._knobs / (np.asarray(REPLICA_ACTION_NVEC) - 1)
        for i, rid in enumerate(self.replica_ids):
            o = np.concatenate([feats[i], mean_feats, knobs_norm[i], [min(thr[i], FEATURE_CLIP), attain[i]]])
            obs[rid] = np.clip(o, -FEATURE_CLIP, FEATURE_CLIP).astype(np.float32)
            comps = {"throughput": float(thr[i]), "slo": float(local_slo[i]),
                     "preemption": float(preempt_term[i]), "shared": shared}
            rew[rid] = float(c.w_throughput * comps["throughput"] + c.w_replica_slo * comps["slo"]
                             + c.w_preemption * comps["preemption"] + c.w_shared * comps["shared"])
            info[rid] = {f"reward/{k}": v for k, v in comps.items()}
            info[rid]["window"] = self._window
            info[rid]["knobs"] = self._knobs[i].copy()
        self._win.roll(self._active)
        return obs, rew, info

    def _advance(self, first: bool = False):
        """Run the simulator to the next decision or window end; build the multi-agent return."""
        cl = self.cluster
        obs, rew, info = {}, {}, {}
        while True:
            req = cl.run_until_decision(self._next_window_s)
            if req is None:
                break
            # an arrival that needs a decision
            self._sweep(cl.now_s)
            o = self._router_obs(req)
            if not self._mask.any():
                # no replica can ever hold this prompt: send it to the largest cache; the simulator
                # rejects it with a reason (never lost) and the router is charged a rejection.
                self.cluster.dispatch(req, int(np.argmax(self._kv_cap_tokens)))
                self._active.append(req)
                self._active_w += self._tenant_w[req.tenant]
                continue
            self._pending = req
            self._expect_replicas = False
            obs[ROUTER] = o
            rew[ROUTER] = self._router_reward()
            info[ROUTER] = self._router_info(req)
            self._reset_router_acc()
            if first:
                return obs, info
            return obs, rew, {"__all__": False}, {"__all__": False}, info
        # window boundary: replicas act
        r_obs, r_rew, r_info = self._window_end()
        self._window += 1
        self._next_window_s = (self._window + 1) * self.task.window_s
        obs.update(r_obs)
        info.update(r_info)
        self._expect_replicas = True
        self._pending = None
        if self._window >= self.task.episode_windows:
            self._done = True
            # final observation for the router too (no request: mask all ones)
            obs[ROUTER] = self._router_obs_empty()
            rw = dict(r_rew)
            rw[ROUTER] = self._router_reward()
            info[ROUTER] = self._router_info(None)
            self._reset_router_acc()
            truncs = {a: True for a in self.possible_agents}
            truncs["__all__"] = True
            terms = {a: False for a in self.possible_agents}
            terms["__all__"] = False
            if first:
                return obs, info
            return obs, rw, terms, truncs, info
        if first:
            return obs, info
        rew.update(r_rew)
        return obs, rew, {"__all__": False}, {"__all__": False}, info

    def _router_obs_empty(self) -> dict:
        o = self._router_obs(None)
        o["action_mask"] = np.ones(self.n, dtype=np.float32)
        return o

    # --------------------------------------------------------------------------------- episode log
    def drain(self, max_drain_s: float = 3600.0) -> None:
        """Finish the in-flight requests (no new arrivals; at most ``max_drain_s`` more sim time)."""
        if self.cluster is None:
            raise RuntimeError("no episode: call reset() first")
        if not self._done:
            raise RuntimeError("drain() before the episode ended would skip router decisions")
        self.cluster.drain(self._episode_s + max_drain_s)

    def episode_log(self, policy: str | None = None, seed: int | None = None):
        """The grader's log of this episode (drains in-flight requests first)."""
        from inferencegym.envs.cluster_grading import episode_log_from_requests

        self.drain()
        usd_per_s = sum(float(rep.model.gpu_hour_usd) for rep in self.cluster.replicas) / 3600.0
        return episode_log_from_requests(self.task, self.requests, policy=policy, seed=seed,
                                         capacity_rps=self._cap_rps.tolist(), usd_per_s=usd_per_s)


class _WindowAcc:
    """Per-replica accumulators of one control window."""

    def __init__(self, n: int):
        self.n = n
        self.first_tokens = np.zeros(n)
        self.slo_sum = np.zeros(n)
        self.slo_ok = np.zeros(n)
        self.dispatched = np.zeros(n)
        self.completed_tokens = np.zeros(n)   # output tokens of requests completed in the window
        self._prev_active_tokens = np.zeros(n)
        self._prev_active_preempt = np.zeros(n)
        self._done_preempt = np.zeros(n)

    def produced_tokens(self, active: list) -> np.ndarray:
        cur = np.zeros(self.n)
        for r in active:
            cur[r.replica_id] += r.generated_tokens
        self._cur_active_tokens = cur
        return self.completed_tokens + cur - self._prev_active_tokens_for(active)

    def _prev_active_tokens_for(self, active: list) -> np.ndarray:
        return self._prev_active_tokens

    def preemptions(self, active: list) -> np.ndarray:
        cur = np.zeros(self.n)
        for r in active:
            cur[r.replica_id] += r.preemptions
        self._cur_active_preempt = cur
        return np.maximum(0.0, cur - self._prev_active_preempt)

    def roll(self, active: list) -> None:
        self.first_tokens[:] = 0
        self.slo_sum[:] = 0
        self.slo_ok[:] = 0
        self.dispatched[:] = 0
        self.completed_tokens[:] = 0
        self._prev_active_tokens = self._cur_active_tokens
        self._prev_active_preempt = self._cur_active_preempt


def _bucket(buckets: tuple, value: float) -> int:
    return int(np.argmin([abs(b - value) for b in buckets]))


def _as_int(x: Any, what: str) -> int:
    try:
        if isinstance(x, (bool, np.bool_)):
            raise TypeError
        arr = np.asarray(x)
        if arr.shape != () or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError
        return int(arr)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an integer, got {x!r}") from None


def _parse_replica_action(act: Any, rid: str) -> np.ndarray:
    try:
        a = np.asarray(act)
        if a.shape != (4,) or not np.issubdtype(a.dtype, np.integer):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"{rid} action must be 4 integer bucket indices (batch_cap, kv_budget, "
                         f"speculation, chunk) < {list(REPLICA_ACTION_NVEC)}; got {act!r}") from None
    if np.any(a < 0) or np.any(a >= np.asarray(REPLICA_ACTION_NVEC)):
        raise ValueError(f"{rid} action {a.tolist()} out of range; each index must be < "
                         f"{list(REPLICA_ACTION_NVEC)} (batch_cap, kv_budget, speculation, chunk)")
    return a.astype(np.int64)
