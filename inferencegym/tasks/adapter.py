"""The one task -> simulator adapter: every simulator object a task needs is built here.

Both environments, replay's simulated target and the capacity measurement use these functions, so
a task means the same cluster everywhere: one set of initial knobs (:class:`ReplicaKnobs`), one
hardware pattern, one tenant conversion, one request builder.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request, TenantSpec
from inferencegym.tasks.episode_workload import EpisodeWorkload, generate_episode_workload
from inferencegym.tasks.spec import ReplicaKnobs, TaskSpec
from inferencegym.workload.hashchain import sim_block_hashes_many

__all__ = ["tenant_specs", "replica_hardware", "replica_configs", "cluster_config", "make_cluster",
           "requests_from_workload", "build_requests"]


def tenant_specs(task: TaskSpec) -> tuple[TenantSpec, ...]:
    """The task's tenants as simulator tenants (SLOs, priority, speculative acceptance)."""
    return tuple(TenantSpec(name=t.name, priority=t.priority, ttft_slo_s=t.ttft_slo_s,
                            tbt_slo_s=t.tbt_slo_s, spec_acceptance=t.spec_acceptance)
                 for t in task.tenants)


def replica_hardware(task: TaskSpec) -> list[tuple[str, int]]:
    """``(gpu, tensor_parallel)`` of every replica (the cluster options' pattern, cycled)."""
    pattern = (task.cluster.replica_hardware if task.cluster is not None else ()) or \
        ((task.gpu, task.tensor_parallel),)
    return [(str(pattern[i % len(pattern)][0]), int(pattern[i % len(pattern)][1]))
            for i in range(task.replicas)]


def replica_configs(task: TaskSpec, knobs: ReplicaKnobs | None = None) -> list[ReplicaConfig]:
    """One :class:`ReplicaConfig` per replica with the task's (or the given) initial knobs."""
    k = task.knobs if knobs is None else knobs
    cpu_kv_gb = task.cluster.cpu_kv_gb if task.cluster is not None else 0.0
    return [ReplicaConfig(model=task.model, gpu=gpu, tensor_parallel=tp, quantization=k.quantization,
                          scheduler=k.scheduler, batch_cap=k.batch_cap,
                          kv_budget_fraction=k.kv_budget_fraction, chunk_size=task.chunk_size_tokens,
                          speculation_depth=k.speculation_depth, engine_profile=task.engine_profile,
                          cpu_kv_gb=cpu_kv_gb)
            for gpu, tp in replica_hardware(task)]


def cluster_config(task: TaskSpec, *, router: str | None = None, knobs: ReplicaKnobs | None = None,
                   priority_routing: bool = False) -> ClusterConfig:
    """The task's :class:`ClusterConfig` (``router`` defaults to the task's)."""
    reps = replica_configs(task, knobs)
    hetero = {"replica_configs": tuple(reps)} if any(r != reps[0] for r in reps) else {}
    return ClusterConfig(replica=reps[0], num_replicas=len(reps),
                         router=task.router if router is None else router,
                         tenants=tenant_specs(task), priority_routing=priority_routing,
                         disaggregate=False, prefill_replicas=task.prefill_replicas, **hetero)


def make_cluster(task: TaskSpec, rng: np.random.Generator, *, router: str | None = None,
                 knobs: ReplicaKnobs | None = None, priority_routing: bool = False) -> Cluster:
    """A fresh :class:`Cluster` for the task, its randomness drawn from ``rng``."""
    return Cluster(cluster_config(task, router=router, knobs=knobs,
                                  priority_routing=priority_routing), rng=rng)


def requests_from_workload(w: EpisodeWorkload, lo: int = 0, hi: int | None = None, *,
                           first_id: int = 0, until_s: float = math.inf,
                           block_tokens: int = 16) -> list[Request]:
    """Requests ``lo:hi`` of an episode workload (ids from ``first_id``), those arriving by ``until_s``;
    a prefix-sharing workload's hash chains become ``block_hashes`` for ``block_tokens``-token KV
    blocks (:func:`inferencegym.workload.sim_block_hashes`)."""
    hi = len(w.arrival_s) if hi is None else hi
    a, p, o, ten, pr = (w.arrival_s[lo:hi].tolist(), w.prompt_tokens[lo:hi].tolist(),
                        w.output_tokens[lo:hi].tolist(), w.tenant[lo:hi].tolist(),
                        w.priority[lo:hi].tolist())
    if w.hash_ids is None:
        return [Request(req_id=first_id + i, arrival_s=a[i], prompt_tokens=p[i], output_tokens=o[i],
                        tenant=ten[i], priority=pr[i]) for i in range(len(a)) if a[i] <= until_s]
    keep = [i for i in range(len(a)) if a[i] <= until_s]
    chains = w.hash_ids[lo:hi]
    hs = sim_block_hashes_many([chains[i] for i in keep], [p[i] for i in keep],
                               trace_block_tokens=w.hash_block_tokens, sim_block_tokens=block_tokens)
    return [Request(req_id=first_id + i, arrival_s=a[i], prompt_tokens=p[i], output_tokens=o[i],
                    tenant=ten[i], priority=pr[i], block_hashes=h) for i, h in zip(keep, hs)]


def build_requests(task: TaskSpec, duration_s: float, rng: np.random.Generator) -> list[Request]:
    """All requests of ``duration_s`` simulated seconds of the task's workload."""
    windows = max(1, int(math.ceil(duration_s / task.window_s)))
    w = generate_episode_workload(dataclasses.replace(task, episode_windows=windows), rng)
    return requests_from_workload(w, until_s=duration_s)
