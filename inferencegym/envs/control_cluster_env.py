"""The control plane as agents: an RLlib ``MultiAgentEnv`` with an autoscaler, an admission
controller, a router and one agent per serving replica over a fleet whose replicas come and go.

``ControlClusterEnv(config)`` plays one episode of a control task (``cluster_autoscaling`` /
``cluster_admission``, :mod:`inferencegym.tasks.control`) on ``sim.Fleet`` (replica lifecycle:
provisioning + model loading + warm-up, draining, crashes) with ``router="external"``. Agents (ids
in :mod:`inferencegym.envs.control_spaces`) and when they act, on the fleet's 1-s gateway ticks:

- ``autoscaler``: at t = 0 and every ``interval_s`` (15 s): target replica count,
  ``Discrete(max_replicas + 1)`` (clamped to at least 1). Observation: the learned autoscaler's
  features (``envs/control_features.py``, feature set ``autoscaler_features``, default ``residual``:
  the shipped ``pretrained:cluster_autoscaling``'s; ``schedule`` for the DAgger MLP
  ``benchmarks/results/control/dagger_r3``, which PPO can warm-start from).
  A scale-up only adds a serving replica after provisioning + loading + warm-up (``sim/lifecycle.py``).
  Absent on ``cluster_admission`` (a fixed fleet).
- ``admission``: at every gateway tick with arrivals, after the lifecycle's transitions and before
  the tick's admission decisions: an admission level (``Discrete(7)``,
  ``sim.gateway.ADMISSION_LEVELS``: shares of standard / sheddable requests admitted; critical
  requests always are) for the tick's requests. Observation: ``gateway_features`` (10 values; the
  arrival counts are those of the ticks it acted at, the tick's own included: exactly what the
  learned admission controller reads inside ``evaluate``).
- ``router``: at every arrival (and every retry of a request evicted by a crash): the slot,
  ``Discrete(max_replicas)``. Observation ``Dict(replicas (max_replicas, 7), request (5,),
  action_mask, present)``: ``present`` is 1 for serving slots, ``action_mask`` the same (only a
  serving replica takes a request: provisioning, loading, warming, draining and released slots are
  masked; a masked choice raises ``ValueError`` and changes nothing). The cross-replica attention
  module (``rl/modules.py``, ``present_key``) leaves absent slots out of its attention and pooling.
- ``replica_{i}``: every ``window_s`` (``replica_window_s``, default 30 s), only the slots whose
  replica is serving: the agent set changes with the lifecycle (``env.agents``). Action: the
  cluster env's knobs ``MultiDiscrete([5, 4, 3, 4])``; a new replica starts from the task's knobs.

Any controller can instead be a rule acting inside the env: ``config["autoscaler"]`` /
``config["admission"]`` take ``"agent"`` (default: the task's own controller is the agent) or a
controller object (``reset(ctx)`` / ``act(ControlObs)``; ``reset(capacity_rps)`` /
``decide(tier, t_s, state)``; ``rl/control.py``'s ``control_env_config`` builds them from names such
as ``scheduled`` or ``gaie_shed``); an admission of ``None`` admits all; ``config["router"]`` is
``"agent"`` or ``"least_outstanding"``, ``config["replicas"]`` ``"agent"`` or ``"fixed"``.

**Rewards**: one team reward, so each agent's return over an episode is the task's grade minus
``grade_cost_weight`` (on ``cluster_autoscaling``; on ``cluster_admission`` the tier-weighted grade):
every step gives the acting agents minus ``w`` x the GPU-seconds since their previous step / the full
fleet's GPU-seconds over the episode; the final step gives every agent that acted ``(1 - w)`` x the
SLO attainment (the grade's other term). ``infos[agent]`` carries ``t_s`` and, at the end,
``score`` and the fleet ``summary``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Generator

import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from inferencegym.envs.cluster_spaces import KNOB_BUCKETS, parse_replica_action, parse_router_action
from inferencegym.envs.control_features import control_features, gateway_features
from inferencegym.envs.control_spaces import (ADMISSION, AUTOSCALER, ROUTER, agent_spaces, knob_indices,
                                              request_row, slot_rows)
from inferencegym.sim.config import ClusterConfig, ReplicaConfig
from inferencegym.sim.fleet import Fleet, FleetConfig
from inferencegym.sim.gateway import ADMISSION_LEVELS, AdmitAll, LevelAdmission
from inferencegym.sim.lifecycle import LifecycleConfig
from inferencegym.tasks.control import (DEFAULT_WINDOWS, arrivals, control_context, day_rates, day_split,
                                        episode_windows, get_control_task, grade, lifecycle_config,
                                        load_windows)

CONFIG_KEYS = ("task_id", "split", "load_windows", "failures", "episode_s", "lifecycle", "autoscaler",
               "admission", "router", "replicas", "replica_window_s", "autoscaler_features", "seed")
"""Keys of the ``config`` dict (``lifecycle``: a dict of ``LifecycleConfig`` overrides)."""


class _AgentLevel(LevelAdmission):
    """The admission agent's level as the gateway's admission controller (set every tick)."""

    def level_at(self, state: Any) -> int:
        return self.level


class ControlClusterEnv(MultiAgentEnv):
    """Autoscaler + admission + router + replica agents over a lifecycle fleet (module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, config: dict | None = None):
        super().__init__()
        cfg = dict(config or {})
        bad = sorted(set(cfg) - set(CONFIG_KEYS))
        if bad:
            raise ValueError(f"unknown ControlClusterEnv config keys {bad}; valid: {sorted(CONFIG_KEYS)}")
        task = get_control_task(cfg.get("task_id", "cluster_autoscaling"))
        if cfg.get("episode_s") is not None:
            task = dataclasses.replace(task, episode_s=float(cfg["episode_s"]))
        self.task = task
        self.windows = load_windows(str(cfg.get("load_windows") or DEFAULT_WINDOWS))
        self.days = day_split(len(self.windows))[cfg.get("split", "train")]
        lc = lifecycle_config(task, bool(cfg.get("failures", False)))
        self.lc: LifecycleConfig = dataclasses.replace(lc, **cfg.get("lifecycle", {}))
        self.features = cfg.get("autoscaler_features", "residual")
        self.auto = cfg.get("autoscaler", None if task.fixed_replicas else "agent")
        if task.fixed_replicas and self.auto is not None:
            raise ValueError(f"{task.task_id} has a fixed fleet: no autoscaler (drop 'autoscaler')")
        self.adm = cfg.get("admission", "agent" if task.fixed_replicas else None)
        self.router_mode = cfg.get("router", "agent")
        self.replica_mode = cfg.get("replicas", "agent")
        for k, v, ok in (("router", self.router_mode, ("agent", "least_outstanding")),
                         ("replicas", self.replica_mode, ("agent", "fixed"))):
            if v not in ok:
                raise ValueError(f"config[{k!r}] must be one of {ok}, got {v!r}")
        self.replica_window_s = float(cfg.get("replica_window_s", 30.0))
        self._default_seed = cfg.get("seed")
        n = self.lc.max_replicas
        self.replica_ids = [f"replica_{i}" for i in range(n)]
        self.observation_spaces, self.action_spaces = agent_spaces(n, self.features)
        self.possible_agents = ([AUTOSCALER] if self.auto == "agent" else []) + \
            ([ADMISSION] if self.adm == "agent" else []) + \
            ([ROUTER] if self.router_mode == "agent" else []) + \
            (self.replica_ids if self.replica_mode == "agent" else [])
        if not self.possible_agents:
            raise ValueError("every controller is a rule: at least one agent must act")
        self.observation_spaces = {a: self.observation_spaces[a] for a in self.possible_agents}
        self.action_spaces = {a: self.action_spaces[a] for a in self.possible_agents}
        self.agents = []
        self.fleet: Fleet | None = None
        self._gen: Generator | None = None

    # ------------------------------------------------------------------------------------ API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seed = self._default_seed if seed is None else seed
        super().reset(seed=seed, options=options)
        t = self.task
        s = int(np.random.default_rng(seed).integers(2**31)) if seed is None else int(seed)
        day = int((options or {}).get("day", self.days[s % len(self.days)]))
        rates = day_rates(t, self.windows, day)
        a_rng, f_rng = np.random.default_rng([s, day]).spawn(2)
        self.arrivals = arr = arrivals(t, rates, a_rng)
        _, nw = episode_windows(t, rates)
        self.episode_s = nw * t.window_s
        router = "external" if self.router_mode == "agent" else "least_outstanding_requests"
        cc = ClusterConfig(replica=ReplicaConfig(model=t.model, gpu=t.gpu, tensor_parallel=t.tensor_parallel),
                           router=router, tenants=t.tenants())
        self.fleet = f = Fleet(cc, FleetConfig(lifecycle=self.lc, tenant_tiers=t.tenant_tiers()), arr, rng=f_rng)
        self.ctx = control_context(t, self.windows, rates, startup_s=f.lifecycle.startup_s())
        if self.auto not in (None, "agent"):
            self.auto.reset(self.ctx)
        adm = _AgentLevel() if self.adm == "agent" else (self.adm if self.adm is not None else AdmitAll())
        if hasattr(adm, "reset"):
            adm.reset(t.capacity_rps)
        f.admission = self._adm_obj = adm
        self._default_knobs = knob_indices(f.cluster.replicas[0].target_config)
        self._knobs = np.tile(self._default_knobs, (self.lc.max_replicas, 1))
        self._rep_obj = list(f.cluster.replicas)
        self._recent: list[int] = []
        self.max_gpu_s = t.max_replicas * f.lifecycle.gpus * self.episode_s
        self._gpu_seen: dict[str, float] = {}
        self._acted: set[str] = set()
        self.day, self.seed_ = day, s
        self._gen = self._loop()
        obs, rew = next(self._gen)
        return obs, {a: {"t_s": f.now_s, "day": day, "seed": s} for a in obs}

    def step(self, action_dict: dict):
        if self._gen is None:
            raise RuntimeError("ControlClusterEnv.step() called before reset() or after the episode ended")
        if not isinstance(action_dict, dict):
            raise ValueError(f"action_dict must be a dict keyed by agent id, got {type(action_dict).__name__}")
        missing = sorted(set(self.agents) - set(action_dict))
        extra = sorted(set(action_dict) - set(self.agents))
        if missing or extra:
            raise ValueError(f"the agents acting now are {sorted(self.agents)}; action_dict is missing "
                             f"{missing} and has {extra} extra")
        self._validate(action_dict)
        try:
            obs, rew = self._gen.send(action_dict)
        except StopIteration as stop:
            self._gen = None
            obs, rew, infos = stop.value
            self.agents = []
            truncs = {a: True for a in obs}
            return obs, rew, {a: False for a in obs} | {"__all__": False}, truncs | {"__all__": True}, infos
        infos = {a: {"t_s": self.fleet.now_s} for a in obs}
        no = {"__all__": False}
        return obs, rew, dict(no), dict(no), infos

    # ------------------------------------------------------------------------------------ internals
    def _validate(self, actions: dict) -> None:
        """Check every action before any takes effect (a bad one changes nothing)."""
        n = self.lc.max_replicas
        for aid, a in actions.items():
            if aid == AUTOSCALER:
                v = parse_router_action(a)
                if not 0 <= v <= n:
                    raise ValueError(f"autoscaler action must be a replica count in 0..{n}; got {v}")
            elif aid == ADMISSION:
                v = parse_router_action(a)
                if not 0 <= v < len(ADMISSION_LEVELS):
                    raise ValueError(f"admission action must be a level in 0..{len(ADMISSION_LEVELS) - 1}; got {v}")
            elif aid == ROUTER:
                v = parse_router_action(a)
                if not 0 <= v < n or self._mask[v] < 0.5:
                    raise ValueError(f"router chose slot {v}, which is not serving (provisioning, loading, "
                                     f"warming, draining or off); valid now: {np.flatnonzero(self._mask).tolist()}")
            else:
                parse_replica_action(a, aid)

    def _team(self, agents: list[str]) -> dict[str, float]:
        """Each acting agent's share of the team reward since its previous step: the GPU cost."""
        g = self.fleet.lifecycle.gpu_seconds(self.fleet.now_s)
        w = self.task.grade_cost_weight if not self.task.fixed_replicas else 0.0
        out = {}
        for a in agents:  # an agent's first step (a replica that just came up) is charged nothing
            out[a] = -w * (g - self._gpu_seen.get(a, g if self.fleet.now_s > 0 else 0.0)) / self.max_gpu_s
            self._gpu_seen[a] = g
            self._acted.add(a)
        return out

    def _ask(self, obs: dict) -> Generator:
        self.agents = list(obs)
        actions = yield obs, self._team(list(obs))
        return actions

    def _loop(self) -> Generator:
        f, t = self.fleet, self.task
        c = f.cluster
        tick = f.config.tick_s
        next_auto, next_win = 0.0, self.replica_window_s
        conc = t.concurrency_at_capacity
        while f.now_s < self.episode_s - 1e-9:
            now = f.now_s
            if self.auto is not None and now >= next_auto - 1e-9:
                if self.auto == "agent":
                    a = yield from self._ask({AUTOSCALER: control_features(f.observe(), self.ctx, self.features)})
                    target = int(a[AUTOSCALER])
                else:
                    target = self.auto.act(f.observe())
                f.set_target(self.ctx.clamp(target))
                next_auto += t.interval_s
            f.tick_begin()
            self._sync_new_replicas()
            if self.replica_mode == "agent" and now >= next_win - 1e-9:
                next_win += self.replica_window_s
                up = c.routable
                if up:
                    a = yield from self._ask({self.replica_ids[i]: self._observe(self.replica_ids[i])
                                              for i in up})
                    for rid, act in a.items():
                        self._set_knobs(int(rid.split("_")[1]), np.asarray(act, dtype=np.int64))
            t1 = min(now + tick, self.episode_s)
            k = f.arrivals_due(t1) if self.adm == "agent" else 0
            if k:  # a level for the tick's arrivals (as LevelAdmission picks one at a tick's first decision)
                self._recent.append(k)
                f.state.arrivals_last_tick = k
                a = yield from self._ask({ADMISSION: gateway_features(f.state, t.capacity_rps, self._recent)})
                self._adm_obj.level = int(a[ADMISSION])
                self._adm_obj.t_level = f.state.now_s  # the agent's level holds for this tick
            f.tick_admit(t1)
            if self.router_mode == "agent":
                while (req := c.run_until_decision(t1)) is not None:
                    self._mask = np.zeros(self.lc.max_replicas, np.float32)
                    self._mask[c.routable] = 1.0
                    tier = f.tiers[req.tenant]
                    a = yield from self._ask({ROUTER: {"replicas": slot_rows(f, conc), "request": request_row(req, tier),
                                                        "action_mask": self._mask, "present": self._mask.copy()}})
                    c.dispatch(req, int(a[ROUTER]))
            else:
                f.run_cluster(t1)
            f.now_s = t1
        return self._final()

    def _sync_new_replicas(self) -> None:
        """A slot whose replica was replaced (a new node after a release or a crash) starts from
        the task's knobs."""
        reps = self.fleet.cluster.replicas
        for i, rep in enumerate(reps):
            if rep is not self._rep_obj[i]:
                self._rep_obj[i] = rep
                self._knobs[i] = knob_indices(rep.target_config)
                self._set_knobs(i, self._default_knobs)

    def _set_knobs(self, i: int, k: np.ndarray) -> None:
        if np.array_equal(self._knobs[i], k):
            return
        batch_cap, kv, spec, chunk = (b[j] for b, j in zip(KNOB_BUCKETS, k))
        self.fleet.cluster.apply_replica_config(replica=i, batch_cap=batch_cap, kv_budget_fraction=kv,
                                                speculation_depth=spec, chunk_size=chunk)
        self._knobs[i] = k

    def _final(self) -> tuple[dict, dict, dict]:
        f, t = self.fleet, self.task
        acted = sorted(self._acted)
        rew = self._team(acted)
        f.finish()
        s = f.summary()
        s["episode_s"] = self.episode_s
        score = grade(t, s)
        w = t.grade_cost_weight if not t.fixed_replicas else 0.0
        end = (1 - w) * s["slo_attainment"] if not t.fixed_replicas else score
        rew = {a: r + end for a, r in rew.items()}
        obs = {a: self._observe(a) for a in acted}
        return obs, rew, {a: {"t_s": f.now_s, "score": score, "summary": s} for a in acted}

    def _observe(self, aid: str) -> Any:
        """An agent's observation now (at the episode end: for the value bootstrap of a truncation)."""
        f, n, conc = self.fleet, self.lc.max_replicas, self.task.concurrency_at_capacity
        if aid == AUTOSCALER:
            return control_features(f.observe(), self.ctx, self.features)
        if aid == ADMISSION:
            return gateway_features(f.state, self.task.capacity_rps, self._recent)
        rows = slot_rows(f, conc)
        if aid == ROUTER:
            present = rows[:, 0].copy()
            return {"replicas": rows, "request": np.zeros(5, np.float32), "action_mask": np.ones(n, np.float32),
                    "present": present}
        i = int(aid.split("_")[1])
        up = rows[:, 0] > 0.5
        mean = rows[up].mean(axis=0) if up.any() else np.zeros(rows.shape[1], np.float32)
        nvec = np.asarray([len(b) for b in KNOB_BUCKETS]) - 1
        return np.concatenate([rows[i], mean, self._knobs[i] / nvec]).astype(np.float32)
