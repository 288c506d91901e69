"""The cluster environment: an RLlib ``MultiAgentEnv`` with a global router and one agent per replica.

``ClusterEnv(config)`` runs one cluster task (:mod:`inferencegym.tasks.cluster`) on the shared
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
  [-100, 100] (stated clip). On prefix-sharing tasks (``cluster_prefix_sharing``,
  ``cluster_multiturn``) three more columns (:data:`~inferencegym.envs.cluster_spaces.PREFIX_FEATURES`):
  the share of the arriving prompt cached on the replica as last published (the view a real
  cache-aware router reads, ``ClusterConfig.cache_publish_interval_s`` stale), the replica's
  published cached blocks / KV capacity, and its recent token-weighted prefix hit rate.
- ``"request"``: Box (5,) float32: prompt tokens / 4096, log1p(prompt) / log1p(32768), tenant
  one-hot (2 slots; tasks have at most 2 tenants), priority.
- ``"action_mask"``: Box (N,) float32 in {0, 1}: 1 for replicas that are up and can admit the
  prompt (its KV cache can hold it). A masked choice raises ``ValueError``.

**Router action**: ``Discrete(N)``, the replica for the arriving request.

**Replica observation**: Box (2F + 6,) float32: the replica's own router-feature row, the cluster mean
of every feature, its current knobs as bucket indices / (buckets - 1) (4 values), and its last
window's local throughput and SLO attainment (:data:`~inferencegym.envs.cluster_spaces.REPLICA_EXTRA_FEATURES`).

**Replica action**: ``MultiDiscrete([5, 4, 3, 4])``: indices into :data:`BATCH_CAP_BUCKETS`,
:data:`KV_FRACTION_BUCKETS`, :data:`SPECULATION_BUCKETS` and :data:`CHUNK_BUCKETS` of
``inferencegym.tasks.cluster``. A replica agent missing from the action dict keeps its knobs.

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
  capacity x the workload's mean output length x window); ``slo`` = mean latency_term of TTFT / SLO over its first
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
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from inferencegym.envs.cluster_features import RouterFeatures
from inferencegym.envs.cluster_reward import ROUTER_COMPONENTS, RouterLedger, replica_rewards
from inferencegym.envs.cluster_spaces import (
    FEATURE_CLIP,
    KNOB_BUCKETS,
    MAX_TENANTS,
    REPLICA_ACTION_NVEC,
    REQUEST_FEATURES,
    ROUTER,
    ROUTER_FEATURES,
    nearest_bucket,
    parse_replica_action,
    parse_router_action,
    replica_action_space,
    replica_observation_space,
    router_observation_space,
)
from inferencegym.envs.curriculum import CurriculumMixin
from inferencegym.envs.reward import ClusterRewardConfig
from inferencegym.tasks.adapter import build_requests, make_cluster
from inferencegym.tasks.cluster import cluster_task, replica_capacity_rps
from inferencegym.tasks.cluster_grading import episode_log_from_requests
from inferencegym.tasks.spec import TaskSpec

__all__ = ["ClusterEnv", "ClusterRewardConfig", "ROUTER", "ROUTER_FEATURES", "REQUEST_FEATURES",
           "REPLICA_ACTION_NVEC", "MAX_TENANTS", "FEATURE_CLIP"]

_REWARD_KEY = {k: f"reward/{k}" for k in ROUTER_COMPONENTS}
"""The router info's key of each reward component."""

CONFIG_KEYS = ("task_id", "num_replicas", "reward", "episode_windows", "seed")
"""Keys of the ``config`` dict."""


class Transition(NamedTuple):
    """What the env returns after an advance (reset uses ``obs`` and ``infos``)."""

    obs: dict
    rewards: dict
    terminateds: dict
    truncateds: dict
    infos: dict


class ClusterEnv(CurriculumMixin, MultiAgentEnv):
    """Global router + one agent per replica over the shared simulator (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, config: dict | None = None):
        super().__init__()
        config = dict(config or {})
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(f"unknown ClusterEnv config keys {unknown}; valid: {sorted(CONFIG_KEYS)}")
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
        self.reward_config = _reward_config(config.get("reward"))
        self._default_seed = config.get("seed")
        self.n = n = task.replicas
        self.replica_ids = [f"replica_{i}" for i in range(n)]
        self.possible_agents = [ROUTER, *self.replica_ids]
        self._agent_set = frozenset(self.possible_agents)
        self.agents = list(self.possible_agents)
        self._cap_rps = np.asarray(replica_capacity_rps(task), dtype=np.float64)
        self._features = RouterFeatures(task, self._cap_rps)
        F = len(self._features.columns)
        rep_space, rep_act = replica_observation_space(F), replica_action_space()
        self.observation_spaces = {ROUTER: router_observation_space(n, F),
                                   **{r: rep_space for r in self.replica_ids}}
        self.action_spaces = {ROUTER: spaces.Discrete(n), **{r: rep_act for r in self.replica_ids}}
        self._capacity_tokens = self._cap_rps * self._features.expected_output_tokens * task.window_s
        self._ledger = RouterLedger(self.reward_config, [float(t.grade_weight) for t in task.tenants],
                                    np.array([t.ttft_slo_s for t in task.tenants], dtype=np.float64), n,
                                    tenants=task.tenants)
        self.cluster = None
        self._pending = None

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
        self.requests = build_requests(self.workload_task(), self._episode_s, np.random.default_rng(wl_ss))
        self.cluster = make_cluster(task, np.random.default_rng(sim_ss), router="external")
        self.cluster.submit(self.requests)
        k = task.knobs
        initial = (k.batch_cap, k.kv_budget_fraction, k.speculation_depth, task.chunk_size_tokens)
        self._knobs = np.tile([nearest_bucket(b, v) for b, v in zip(KNOB_BUCKETS, initial)], (self.n, 1))
        self._features.reset(self.cluster, self._batch_caps())
        self._up = [True] * self.n  # which replicas may be chosen
        self._window = 0
        self._next_window_s = task.window_s
        self._ledger.reset()
        self._first_marks: list = []  # Cluster.first_tokens_since's marks
        self.decisions = 0
        self._done = False
        self._pending = None
        t = self._advance()
        return t.obs, t.infos

    def step(self, action_dict: dict):
        if self.cluster is None:
            raise RuntimeError("ClusterEnv.step() called before reset()")
        if self._done:
            raise RuntimeError("ClusterEnv.step() called after the episode ended; call reset()")
        if not isinstance(action_dict, dict):
            raise ValueError(f"action_dict must be a dict keyed by agent id, got {type(action_dict).__name__}")
        agents = self._agent_set
        if not agents.issuperset(action_dict):
            bad = sorted(set(action_dict) - agents)
            raise ValueError(f"unknown agent ids {bad}; valid: router, replica_0..replica_{self.n - 1}")
        if self._pending is not None:
            self._route(action_dict)
        else:
            # validate every replica action first: nothing changes if one is bad
            parsed = {}
            for rid, act in action_dict.items():
                if rid == ROUTER:
                    raise ValueError("the router has no request to route now (replica agents act at "
                                     "window boundaries); drop 'router' from the action dict")
                parsed[int(rid.split("_")[1])] = parse_replica_action(act, rid)
            for i, k in parsed.items():
                self._apply_knobs(i, k)
        return tuple(self._advance())

    @property
    def pending_request(self):
        """The request waiting for the router's decision (None at window boundaries)."""
        return self._pending

    # --------------------------------------------------------------------------------- internals
    def _route(self, action_dict: dict) -> None:
        if ROUTER not in action_dict:
            raise ValueError("the router must act: a request is waiting for a replica "
                             f"(action_dict has {sorted(action_dict)})")
        a = parse_router_action(action_dict[ROUTER])
        if not 0 <= a < self.n:
            raise ValueError(f"router action must be a replica index in 0..{self.n - 1}; got {a}")
        if self._mask[a] < 0.5:
            valid = np.flatnonzero(self._mask > 0.5).tolist()
            raise ValueError(f"router chose replica {a}, which is masked out (down or cannot admit "
                             f"a {self._pending.prompt_tokens}-token prompt); valid now: {valid}")
        self.cluster.dispatch(self._pending, a)
        self._ledger.dispatched(self._pending, a)
        self._pending = None
        self.decisions += 1

    def _batch_caps(self) -> np.ndarray:
        return np.array([KNOB_BUCKETS[0][k] for k in self._knobs[:, 0]], np.float64)

    def _apply_knobs(self, i: int, k: np.ndarray) -> None:
        if self._knobs[i].tolist() == k.tolist():  # (np.array_equal of two int rows of 4)
            return
        batch_cap, kv, spec, chunk = (b[j] for b, j in zip(KNOB_BUCKETS, k))
        self.cluster.apply_replica_config(replica=i, batch_cap=batch_cap, kv_budget_fraction=kv,
                                          speculation_depth=spec, chunk_size=chunk)
        self._knobs[i] = k
        self._features.on_knobs_changed(self._batch_caps())

    def _router_obs(self, req) -> dict:
        feats = self._features.replicas(req.prompt_tokens if req is not None else None, req)
        ok = [1.0 if f and u else 0.0 for f, u in zip(self._features.fits, self._up)]
        self._mask = np.array(ok, dtype=np.float32)
        self._any_fits = 1.0 in ok
        return {"replicas": feats, "request": self._features.request(req), "action_mask": self._mask}

    def _router_info(self, req, comps: dict[str, float]) -> dict:
        info = {"t_s": self.cluster.now_s, "decision": self.decisions}
        for k, v in comps.items():
            info[_REWARD_KEY.get(k) or f"reward/{k}"] = v
        info["outstanding_requests"], info["kv_occupancy"] = self._features.outstanding_and_kv()
        if req is not None:
            info["request_prompt_tokens"] = req.prompt_tokens
            info["request_tenant"] = req.tenant
        return info

    def _window_end(self) -> tuple[dict, dict, dict]:
        """Observations, rewards and infos of the replica agents at a window boundary."""
        self._ledger.sweep(self.cluster.now_s)
        feats = self._features.replicas(None)
        rw = replica_rewards(self._ledger, self._capacity_tokens)
        mean_feats = feats.mean(axis=0)
        knobs_norm = self._knobs / (np.asarray(REPLICA_ACTION_NVEC) - 1)
        # every replica's row at once: [own features, cluster mean, knobs, throughput, SLO] in
        # float64 (what the concatenation of each row promotes to), clipped, then float32
        extra = np.empty((self.n, 2), dtype=np.float64)
        extra[:, 0] = np.minimum(rw.throughput, FEATURE_CLIP)
        extra[:, 1] = rw.slo_attainment
        rows = np.concatenate([feats, np.broadcast_to(mean_feats, feats.shape), knobs_norm, extra], axis=1)
        rows = np.clip(rows, -FEATURE_CLIP, FEATURE_CLIP).astype(np.float32)
        total = rw.total.tolist()
        comps = [(f"reward/{k}", np.asarray(v, dtype=np.float64).tolist()) for k, v in rw.components.items()]
        knobs = self._knobs.copy()
        obs, rew, info = {}, {}, {}
        for i, rid in enumerate(self.replica_ids):
            obs[rid] = rows[i]
            rew[rid] = total[i]
            d = info[rid] = {k: v[i] for k, v in comps}
            d["window"] = self._window
            d["knobs"] = knobs[i]
        return obs, rew, info

    def _advance(self) -> Transition:
        """Run the simulator to the next router decision or window end."""
        cl = self.cluster
        not_done = {"__all__": False}
        while True:
            req = cl.run_until_decision(self._next_window_s)
            if req is None:
                break
            led = cl.ledger
            self._ledger.sweep(cl.now_s, led.completed + led.rejected, cl.first_tokens_since(self._first_marks))
            o = self._router_obs(req)
            if not self._any_fits:
                # no replica can ever hold this prompt: send it to the largest cache; the simulator
                # rejects it with a reason (never lost) and the router is charged a rejection.
                replica = int(np.argmax(self._features.kv_capacity_tokens))
                cl.dispatch(req, replica)
                self._ledger.dispatched(req, replica, decided=False)
                continue
            self._pending = req
            total, comps = self._ledger.take()
            return Transition({ROUTER: o}, {ROUTER: total}, not_done, dict(not_done),
                              {ROUTER: self._router_info(req, comps)})
        # window boundary: the replicas act
        obs, rew, info = self._window_end()
        self._window += 1
        self._next_window_s = (self._window + 1) * self.task.window_s
        if self._window < self.task.episode_windows:
            return Transition(obs, rew, not_done, dict(not_done), info)
        self._done = True
        # final observation for the router too (no request: mask all ones)
        obs[ROUTER] = self._router_obs(None)
        obs[ROUTER]["action_mask"] = np.ones(self.n, dtype=np.float32)
        rew[ROUTER], comps = self._ledger.take()
        info[ROUTER] = self._router_info(None, comps)
        truncs = {a: True for a in self.possible_agents}
        truncs["__all__"] = True
        terms = {a: False for a in self.possible_agents}
        terms["__all__"] = False
        return Transition(obs, rew, terms, truncs, info)

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
        self.drain()
        usd_per_s = sum(float(rep.model.gpu_hour_usd) for rep in self.cluster.replicas) / 3600.0
        return episode_log_from_requests(self.task, self.requests, policy=policy, seed=seed,
                                         capacity_rps=self._cap_rps.tolist(), usd_per_s=usd_per_s)


def _reward_config(rw: Any) -> ClusterRewardConfig:
    if isinstance(rw, ClusterRewardConfig):
        return rw
    rw = rw or {}
    valid = {f.name for f in dataclasses.fields(ClusterRewardConfig)}
    bad = sorted(set(rw) - valid)
    if bad:
        raise ValueError(f"unknown reward keys {bad}; valid: {sorted(valid)}")
    return ClusterRewardConfig(**rw)
