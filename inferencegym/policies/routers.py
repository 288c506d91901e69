"""Router and replica baselines for the cluster environment (``ClusterEnv``).

Router policies are thin adapters over the simulator's router registry (``inferencegym.sim.router``):
``act(obs, info=None) -> replica index``, deciding with the simulator's own rule among the replicas
the observation's action mask allows. They must be bound to the env (``policy.bind(env)``; the
evaluation runner does it) because those rules read the cluster's state. ``tests/envs/test_cluster_env.py``
checks that routing through the env with an adapter reproduces the simulator's built-in routing
request for request.

- ``round_robin``: the next replica in turn.
- ``random``: uniform over the allowed replicas (the cluster's Generator).
- ``least_outstanding_requests``: fewest queued + running requests (ties rotate).
- ``least_kv_load``: lowest KV load (blocks used + blocks the queued prompts need, over capacity).
- ``power_of_two_choices``: two distinct replicas at random, the one with fewer outstanding requests.
- ``estimated_ttft``: earliest estimated first token from observable state
  (:mod:`inferencegym.sim.estimates` with every request's remaining output set to the task's mean
  output length): join-the-least-loaded with batch caps, prefill work and GPU speed taken into account.
- ``llmd_precise``, ``llmd_approx``, ``sglang_cache_aware``, ``dynamo_kv``: the production
  cache-aware routers (llm-d precise / approximate prefix scorers, SGLang's cache-aware router,
  NVIDIA Dynamo's KV router) with their published defaults, reading the published cache view or
  their own index (:mod:`inferencegym.sim.cache_routers`).
- ``prefix_oracle`` (privileged): the simulator's hindsight prefix router
  (:mod:`inferencegym.sim.oracle_router`): places prefix groups knowing all future arrivals and
  dispatches on true outstanding work and the current caches.
- ``tier_oracle`` (privileged): ``clairvoyant`` with each replica's exact GPU and CPU-tier cache
  contents (not the published view), the CPU-tier run charged its reload time (the CPU-tier task's
  reference).
- ``clairvoyant_work``: the simulator's clairvoyant router: least outstanding work in tokens
  (remaining prefill + remaining decode, true output lengths).
- ``clairvoyant``: the upper reference (:class:`EarliestFirstTokenRouter`, written here because the
  simulator has no such rule): it knows every request's true output length and replays each
  replica's slot releases (batch cap, running and queued requests, chunked prefill work ahead) to
  estimate when the arriving request's first token would come out, and picks the earliest. No
  learning agent sees output lengths, so this bounds what a learned router can reach.

Replica policies (``act(obs, info=None) -> MultiDiscrete action``): ``replica_static`` keeps the
task's initial knobs (the default), ``replica_random`` samples every window, ``replica_best_static``
sets the task's fixed knobs searched on training seeds (``inferencegym/data/best_static_knobs.json``,
``python -m inferencegym.evaluation.search_cluster_knobs``; the task's initial knobs when none are
shipped). ``best_static_knobs`` = ``estimated_ttft+replica_best_static``: the best observable rule
of issue 21 on the cluster tasks (router and replica knobs together). ``replica_load_knobs``
(:mod:`inferencegym.policies.knob_rules`) picks each replica's knobs by its own load every window;
``load_knobs_rule`` = ``estimated_ttft+replica_load_knobs``. ``best_affinity_knobs`` =
``estimated_ttft_affinity_tuned+replica_affinity_knobs``: the affinity weight and the fixed knobs searched
together on training seeds for the grade (``inferencegym/data/best_affinity_knobs.json``; the prefix tasks);
``best_affinity_p90`` the same searched for p90 TTFT at equal throughput (``best_affinity_p90.json``).

A *cluster policy* pairs a router with a replica policy (:class:`ClusterPolicy`); the spec
``"least_outstanding_requests"`` means that router with ``replica_static``; ``"ROUTER+REPLICA"``
names both.
"""

from __future__ import annotations

import numpy as np

from inferencegym.policies.knob_rules import LoadKnobsReplica, base_knobs, best_static_knobs  # noqa: F401 (re-export)
from inferencegym.policies.knob_rules import shipped_affinity_rule
from inferencegym.policies.replica_policies import (  # noqa: F401 (re-export)
    _REPLICAS,
    REPLICA_POLICIES,
    AffinityKnobsReplica,
    FixedKnobsReplica,
    RandomReplica,
    StaticReplica,
    get_replica_policy,
)
from inferencegym.sim.estimates import decode_iteration_s, first_token_iterations
from inferencegym.sim.router import make_router
from inferencegym.tasks.episode_workload import mean_output_tokens

AFFINITY_S = 0.3
"""Affinity weight of ``estimated_ttft_affinity`` in seconds: the best summed grade of
``benchmarks/affinity_search.py --seeds 2 --weights 0 0.1 0.3`` (training seeds, the tasks' initial knobs;
second session). With the searched replica knobs the weight pays on both prefix tasks; the weights searched
per task with the knobs are ``best_affinity_knobs`` / ``best_affinity_p90`` (:class:`TunedAffinityRouter`)."""
PRODUCTION_ROUTERS: tuple[str, ...] = ("llmd_precise", "llmd_approx", "sglang_cache_aware", "dynamo_kv")
"""The production cache-aware routers of ``inferencegym.sim.cache_routers`` (published defaults)."""
ROUTER_POLICIES: tuple[str, ...] = ("round_robin", "random", "least_outstanding_requests",
                                    "least_kv_load", "power_of_two_choices", "estimated_ttft",
                                    "estimated_ttft_affinity", "estimated_ttft_affinity_tuned",
                                    "estimated_ttft_affinity_p90",
                                    *PRODUCTION_ROUTERS, "clairvoyant", "clairvoyant_work",
                                    "prefix_oracle", "tier_oracle")
CLUSTER_ALIASES: dict[str, str] = {"best_static_knobs": "estimated_ttft+replica_best_static",
                                   "load_knobs_rule": "estimated_ttft+replica_load_knobs",
                                   "best_affinity_knobs": "estimated_ttft_affinity_tuned+replica_affinity_knobs",
                                   "best_affinity_p90": "estimated_ttft_affinity_p90+replica_affinity_p90"}
"""Named cluster policies that pair a router with a replica policy."""
PRIVILEGED_ROUTERS: tuple[str, ...] = ("clairvoyant", "clairvoyant_work", "prefix_oracle", "tier_oracle")
"""Routers that read what no observation carries (true output lengths; ``prefix_oracle`` also the
future arrivals and the replicas' current caches): references only, never served to an agent
(``inferencegym.policies.is_privileged``)."""


def _allowed(obs: dict) -> list[int]:
    mask = np.asarray(obs["action_mask"]) > 0.5
    if not mask.any():
        raise ValueError("router observation has an all-zero action_mask: no replica can take the "
                         "request (the env routes such requests itself; this obs is malformed)")
    return np.flatnonzero(mask).tolist()


def _bound_request(policy):
    """``(env, pending request)`` of a router policy that reads the simulator: ValueError (one line,
    what to do) when it is not bound to a ``ClusterEnv`` or no request is waiting."""
    env = policy._env
    if env is None:
        raise ValueError(f"router policy {policy.name!r} is not bound to a ClusterEnv; call "
                         f"policy.bind(env) (it reads the simulator's state)")
    req = env.pending_request
    if req is None:
        raise ValueError(f"router policy {policy.name!r} asked to act but no request is waiting")
    return env, req


class SimRouterPolicy:
    """A thin adapter: the simulator's router ``name`` (``inferencegym.sim.router.ROUTERS``) deciding
    for ``ClusterEnv``.

    It must be bound to the env it acts in (:meth:`bind`; the evaluation runner does it), because the
    simulator's routers read the cluster's state directly (queues, KV blocks and, for
    ``clairvoyant``, the true output lengths that no observation carries). The candidates are the
    replicas allowed by the observation's action mask. Randomised routers draw from the cluster's
    Generator exactly as the simulator's built-in routing does, so a routed episode equals the
    simulator's own run with that router.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.sim_name = name
        self._make = make_router
        self._router = make_router(name)
        self._env = None

    def bind(self, env) -> "SimRouterPolicy":
        self._env = env
        return self

    def reset(self, seed: int | None = None) -> None:
        self._router = self._make(self.sim_name)  # fresh rotation state every episode

    def act(self, obs: dict, info: dict | None = None) -> int:
        env, req = _bound_request(self)
        if self._router.needs_sync:
            env.cluster.sync()
        return int(self._router.choose(env.cluster, req, _allowed(obs)))


class EarliestFirstTokenRouter:
    """``clairvoyant``: earliest estimated first token, from true output lengths (see module doc).

    Per allowed replica, :func:`inferencegym.sim.estimates.first_token_iterations` with the true
    remaining outputs (slots free when running requests finish; queued requests take the earliest
    free slots; then the chunked prefill work ahead), times the replica's decode-iteration time at
    its batch cap (faster GPUs count faster). Ties go to fewer outstanding requests, then the lower
    index.
    """

    name = "clairvoyant"

    def __init__(self) -> None:
        self._env = None
        self._iter_s: dict[tuple[int, int], float] = {}

    def bind(self, env) -> "EarliestFirstTokenRouter":
        self._env = env
        self._iter_s = {}
        return self

    def reset(self, seed: int | None = None) -> None:
        self._iter_s = {}

    def _expected_output(self, env) -> float | None:
        return None  # clairvoyant: the true remaining output of every request

    def _iteration_s(self, i: int, rep) -> float:
        key = (i, rep.cfg.batch_cap)
        v = self._iter_s.get(key)
        if v is None:
            v = self._iter_s[key] = decode_iteration_s(rep)
        return v

    affinity_s = 0.0
    """Seconds of estimated TTFT a fully cached prompt is worth beyond its own prefill saving
    (``estimated_ttft_affinity``: keeping a prefix where it is cached keeps that cache hot)."""

    def act(self, obs: dict, info: dict | None = None) -> int:
        env, req = _bound_request(self)
        cluster = env.cluster
        cluster.sync()
        expected = self._expected_output(env)
        best, best_key = -1, None
        for i in _allowed(obs):
            rep = cluster.replicas[i]
            cached = cluster.published_cached_tokens(i, req)
            est = first_token_iterations(rep, req.prompt_tokens, expected_output_tokens=expected,
                                         cached_tokens=cached)
            key = (est * self._iteration_s(i, rep) - self.affinity_s * cached / max(1, req.prompt_tokens),
                   rep.outstanding(), i)
            if best_key is None or key < best_key:
                best, best_key = i, key
        return int(best)


class EstimatedTTFTRouter(EarliestFirstTokenRouter):
    """``estimated_ttft``: the same earliest-first-token rule from observable state only: every
    request's remaining output is the task's mean output length (a router does not know output
    lengths), the rest (queues, batch caps, prefill work ahead, per-replica iteration time) is what
    a real router can see or measure."""

    name = "estimated_ttft"

    def _expected_output(self, env) -> float | None:
        return mean_output_tokens(env.task.workload)


class AffinityEstimatedTTFTRouter(EstimatedTTFTRouter):
    """``estimated_ttft_affinity``: ``estimated_ttft`` minus ``affinity_s`` x the share of the prompt
    the replica published as cached (observable: the published cache view). The weight was searched
    on training seeds of the prefix tasks (``benchmarks/affinity_search.py``); on tasks without
    prefixes it is ``estimated_ttft``."""

    name = "estimated_ttft_affinity"
    affinity_s = AFFINITY_S


class TunedAffinityRouter(AffinityEstimatedTTFTRouter):
    """``estimated_ttft_affinity_tuned`` / ``_p90``: ``estimated_ttft_affinity`` with the task's weight
    searched together with the replica knobs for the grade (``best_affinity_knobs``) or for p90 TTFT at
    equal throughput (``best_affinity_p90``; ``knob_rules.affinity_rule``)."""

    def __init__(self, objective: str = "grade") -> None:
        super().__init__()
        self.objective = objective
        self.name = "estimated_ttft_affinity_tuned" if objective == "grade" else f"estimated_ttft_affinity_{objective}"

    def bind(self, env) -> "TunedAffinityRouter":
        super().bind(env)
        self.affinity_s = shipped_affinity_rule(env.task.task_id, self.objective)["affinity_s"]
        return self


class TierOracleRouter(EarliestFirstTokenRouter):
    """``tier_oracle`` (privileged): ``clairvoyant`` with the replicas' exact cache contents by tier.

    Per allowed replica: the prompt's blocks in its GPU cache now (not as published), then the run
    after them in its CPU tier now; the first token estimate counts both as not prefilled (true
    remaining outputs, as ``clairvoyant``) and adds the host-to-GPU reload time of the CPU-tier run.
    It reads what no router observes (output lengths, unpublished cache state): a reference for the
    CPU-tier task, never served to an agent."""

    name = "tier_oracle"

    def _chunk_s(self, i: int, rep) -> float:
        """Time of one full prefill chunk on replica ``i`` (the estimate counts prefill in chunks)."""
        key = ("chunk", i, rep.cfg.chunk_size)
        v = self._iter_s.get(key)
        if v is None:
            c = max(1, rep.cfg.chunk_size)
            v = self._iter_s[key] = rep.model.iteration_time_s(((c, 0),))
        return v

    def act(self, obs: dict, info: dict | None = None) -> int:
        env, req = _bound_request(self)
        cluster = env.cluster
        cluster.sync()
        h = req.block_hashes
        best, best_key = -1, None
        for i in _allowed(obs):
            rep = cluster.replicas[i]
            bs = rep.kv.block_size
            mx = (req.prompt_tokens - 1) // bs
            gpu = rep.kv.match(h, mx)[0] if h else 0
            cpu = rep.cpu.match(h, gpu, mx) if (h and rep.cpu is not None and gpu < mx) else 0
            it_s = self._iteration_s(i, rep)
            est = first_token_iterations(rep, req.prompt_tokens, expected_output_tokens=None,
                                         cached_tokens=(gpu + cpu) * bs)
            if cpu:  # the reload in the estimate's unit: prefill chunks of the replica's chunk size
                est += rep.cpu.reload_time_s(cpu) / self._chunk_s(i, rep)
            est *= it_s
            key = (est, rep.outstanding(), i)
            if best_key is None or key < best_key:
                best, best_key = i, key
        return int(best)


def get_router_policy(name: str):
    """A fresh router policy by name; ValueError listing the valid names."""
    if name not in ROUTER_POLICIES:
        raise ValueError(f"unknown router policy {name!r}; valid: {', '.join(ROUTER_POLICIES)}")
    if name == "clairvoyant":
        return EarliestFirstTokenRouter()
    if name == "estimated_ttft":
        return EstimatedTTFTRouter()
    if name == "tier_oracle":
        return TierOracleRouter()
    if name == "estimated_ttft_affinity":
        return AffinityEstimatedTTFTRouter()
    if name in ("estimated_ttft_affinity_tuned", "estimated_ttft_affinity_p90"):
        return TunedAffinityRouter("grade" if name.endswith("tuned") else "p90")
    if name == "clairvoyant_work":
        p = SimRouterPolicy("clairvoyant")
        p.name = "clairvoyant_work"
        return p
    return SimRouterPolicy(name)


class ClusterPolicy:
    """A router policy plus one replica policy shared by all replica agents.

    ``act_all(obs, infos) -> action_dict`` answers every agent present in ``obs`` (the multi-agent
    dict the env returned).
    """

    def __init__(self, router, replica, name: str | None = None) -> None:
        self.router = router
        self.replica = replica
        self.name = name or f"{router.name}+{replica.name}"

    def bind(self, env) -> "ClusterPolicy":
        for p in (self.router, self.replica):
            if hasattr(p, "bind"):
                p.bind(env)
        return self

    def reset(self, seed: int | None = None) -> None:
        ss = np.random.SeedSequence(seed)
        a, b = ss.spawn(2)
        for p, child in ((self.router, a), (self.replica, b)):
            if hasattr(p, "reset"):  # e.g. a loaded RLlib router has no reset()
                p.reset(int(child.generate_state(1)[0]))

    def act_all(self, obs: dict, infos: dict | None = None) -> dict:
        infos = infos or {}
        out = {}
        for aid, o in obs.items():
            if aid == "router":
                out[aid] = self.router.act(o, infos.get(aid))
            else:
                out[aid] = self.replica.act(o, infos.get(aid))
        return out


def get_cluster_policy(spec: str) -> ClusterPolicy:
    """``"ROUTER"`` (with ``replica_static``) or ``"ROUTER+REPLICA"``; ValueError listing names."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"cluster policy spec must be a non-empty string, got {spec!r}")
    router, _, replica = CLUSTER_ALIASES.get(spec, spec).partition("+")
    return ClusterPolicy(get_router_policy(router), get_replica_policy(replica or "replica_static"),
                         name=spec)


def is_cluster_policy(spec: str) -> bool:
    router, _, replica = CLUSTER_ALIASES.get(str(spec), str(spec)).partition("+")
    return router in ROUTER_POLICIES and (not replica or replica in _REPLICAS)
