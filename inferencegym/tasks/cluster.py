"""The cluster tasks of ``ClusterEnv`` (``kind="cluster"``).

They live in the same registry as the single-agent tasks (:func:`inferencegym.tasks.spec.get_task`);
cluster-only settings are typed (:class:`~inferencegym.tasks.spec.ClusterOptions`):

- ``replica_hardware``: a pattern of ``(gpu, tensor_parallel)`` pairs, cycled over the replicas
  (replica ``i`` gets ``pattern[i % len(pattern)]``); the model is ``TaskSpec.model``.
- ``capacity_rps``: the measured sustainable request rate of one replica of each pattern entry
  under this task's request-length distribution (see
  :func:`inferencegym.tasks.capacity.measure_capacity_rps`; the numbers below are its output, and
  ``tests/envs/test_cluster_env_tasks.py`` re-measures them).
- ``load_fraction``: offered load as a share of the cluster's summed capacity. The arrival rates of
  ``TaskSpec.workload`` are derived from it, so they follow the number of replicas.

The replicas' initial knobs are ``TaskSpec.knobs`` (the replica agents change them every window).

Tasks (``replicas`` is the default size; any 2..64 works through :func:`cluster_task`):

``cluster_routing``
    4 identical Llama-2-7B / A100 replicas, Azure conversation lengths, Poisson arrivals at ~80 % of
    capacity. Round-robin ignores the queue it builds; join-the-shortest-queue style routers win on
    the tail.
``cluster_heterogeneous``
    Mixed replicas: H100 x2 (tensor parallel 2) alternating with A100 x1. The H100 replicas serve
    3.6x the requests per second, so round-robin (equal shares) gives each A100 1.85x its capacity at
    80 % of the cluster's capacity, and its queue grows for the whole episode.
``cluster_bursty_multitenant``
    Markov-modulated on/off bursts, unannounced mega-prompts and two tenants (an interactive priority
    tenant with a tight TTFT SLO, and a best-effort batch tenant).
``cluster_prefix_sharing``
    60 shared ~3k-token system prompts (tenants) with Zipf(1.1) popularity, short messages and
    outputs, at 90 % of capacity: pinning the hot prompt to one replica (what prefix-first routers
    do) overloads it; load-only routing prefills it everywhere. Capacity measured with prefix
    caching on.
``cluster_multiturn``
    Multi-turn conversations (each turn = previous context + output + a new message) over 30 shared
    system prompts; sessions end at the 4k context.
``cluster_cpu_kv``
    Mooncake-like long prompts (the fitted ``mooncake_shared_prefix`` generator: 60 shared documents
    of ~15k tokens, 45 % unique prompts) on 4 Llama-3-8B / H100 replicas whose GPU prefix cache is cut to
    20 % (~90k tokens: a handful of prompts) and that each spill evicted prefix blocks to 100 GB of
    host memory (the CPU KV tier, reloaded over PCIe): a block in host memory is worth less than one
    in HBM but more than a miss, which moves the routers' ranking (docs/bench/models_memory.md).
"""

from __future__ import annotations

import dataclasses

from inferencegym.tasks.spec import (
    ClusterOptions,
    GraderSpec,
    PrefixSharingSpec,
    ReplicaKnobs,
    TaskSpec,
    TenantSLO,
    WorkloadSpec,
    get_task,
    register_task,
    task_ids,
)

MIN_REPLICAS, MAX_REPLICAS = 2, 64

# Replica-agent action buckets (MultiDiscrete index -> value); the defaults are in bold in the docs.
BATCH_CAP_BUCKETS: tuple[int, ...] = (16, 32, 64, 128, 256)
"""``batch_cap`` choices of a replica agent (max running sequences)."""
KV_FRACTION_BUCKETS: tuple[float, ...] = (0.5, 0.7, 0.85, 1.0)
"""``kv_budget_fraction`` choices (share of free GPU memory given to the KV cache)."""
SPECULATION_BUCKETS: tuple[int, ...] = (0, 2, 4)
"""``speculation_depth`` choices (draft tokens per step, 0 = off)."""
CHUNK_BUCKETS: tuple[int, ...] = (256, 512, 1024, 2048)
"""``chunk_size`` choices (prefill chunk tokens; the replicas run the chunked ``sarathi`` scheduler)."""


def replica_capacity_rps(spec: TaskSpec) -> list[float]:
    """Sustainable request rate of every replica (the task's measured ``capacity_rps``)."""
    caps = spec.cluster.capacity_rps if spec.cluster is not None else ()
    if not caps:
        raise ValueError(f"cluster task {spec.task_id!r} has no measured capacity_rps "
                         f"(ClusterOptions.capacity_rps)")
    return [float(caps[i % len(caps)]) for i in range(spec.replicas)]


def _with_rates(spec: TaskSpec) -> TaskSpec:
    """Set the workload's rates from ``load_fraction`` x the summed replica capacity."""
    total = sum(replica_capacity_rps(spec))
    load = spec.cluster.load_fraction
    w = spec.workload
    if w.process == "onoff":
        # Keep the long-run mean at load * capacity: mean = (off*r_off + on*r_on) / (on + off), with
        # the ON rate burst_ratio times the OFF rate.
        ratio = spec.cluster.burst_ratio
        duty = w.on_mean_s / (w.on_mean_s + w.off_mean_s)
        off_rate = load * total / (1.0 - duty + duty * ratio)
        w = dataclasses.replace(w, rate_rps=off_rate, burst_rate_rps=ratio * off_rate)
    else:
        w = dataclasses.replace(w, rate_rps=load * total)
    return dataclasses.replace(spec, workload=w)


def cluster_task(task_id: str | TaskSpec, num_replicas: int | None = None) -> TaskSpec:
    """The spec of a cluster task, resized to ``num_replicas`` (2..64) with rates rescaled.

    Raises ValueError for a non-cluster task or a replica count out of range.
    """
    spec = get_task(task_id)
    if spec.kind != "cluster":
        raise ValueError(f"task {spec.task_id!r} is a {spec.kind!r} task, not a cluster task; "
                         f"cluster tasks: {', '.join(task_ids('cluster'))}")
    if num_replicas is None or int(num_replicas) == spec.replicas:
        return spec
    n = int(num_replicas)
    if not MIN_REPLICAS <= n <= MAX_REPLICAS:
        raise ValueError(f"num_replicas must be in {MIN_REPLICAS}..{MAX_REPLICAS}; got {num_replicas}")
    return _with_rates(dataclasses.replace(spec, replicas=n))


# ---------------------------------------------------------------------------------------------
# Registered tasks. Capacities: output of `python benchmarks/cluster_capacity.py` (see
# docs/bench/cluster_env.md); re-measured by tests/envs/test_cluster_env_tasks.py.

# Fixed hardware, so no cost or quality term: half the SLO share (goodput), half the tail latency
# (p99 TTFT per tenant against its SLO), so that a router that meets a loose SLO with a 3x worse
# tail does not grade like the best one.
_GRADER = GraderSpec(w_slo=0.5, w_cost=0.0, w_quality=0.0, w_latency=0.5)
_KNOBS = ReplicaKnobs(scheduler="sarathi", batch_cap=16, kv_budget_fraction=0.9, speculation_depth=0)
_COMMON = dict(kind="cluster", model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=4,
               router="external", window_s=2.0, episode_windows=60, knobs=_KNOBS,
               chunk_size_tokens=512, grader=_GRADER, ref_batch=64.0)
"""What every cluster task shares: 4 replicas of Llama-2-7B routed externally (by the router agent)."""
_ONE_TENANT = (TenantSLO(name="default", priority=0, ttft_slo_s=1.0, tbt_slo_s=0.2),)

register_task(_with_rates(TaskSpec(
    task_id="cluster_routing",
    description="4 identical Llama-2-7B/A100 replicas, Azure conversation lengths, Poisson arrivals at "
                "~80% of capacity: route each request to a replica.",
    difficulty="easy",
    tenants=_ONE_TENANT,
    workload=WorkloadSpec(process="poisson", length_fit="azure_conv",
                          max_prompt_tokens=4096, max_output_tokens=1024),
    cluster=ClusterOptions(replica_hardware=(("a100-80gb", 1),), capacity_rps=(3.4,),
                           load_fraction=0.8),
    **_COMMON)))

register_task(_with_rates(TaskSpec(
    task_id="cluster_heterogeneous",
    description="Mixed replicas (H100 x2 TP2 alternating with A100 x1): capacities differ 1.9x, so "
                "equal shares (round-robin) overload the slow replicas.",
    difficulty="medium",
    tenants=_ONE_TENANT,
    workload=WorkloadSpec(process="poisson", length_fit="azure_conv",
                          max_prompt_tokens=4096, max_output_tokens=1024),
    cluster=ClusterOptions(replica_hardware=(("h100-80gb", 2), ("a100-80gb", 1)),
                           capacity_rps=(12.3, 3.4), load_fraction=0.8),
    **_COMMON)))

register_task(_with_rates(TaskSpec(
    task_id="cluster_bursty_multitenant",
    description="On/off bursts, unannounced mega-prompts and two tenants (interactive priority tenant "
                "with a tight TTFT SLO, best-effort batch tenant) on 4 A100 replicas.",
    difficulty="hard",
    tenants=(TenantSLO(name="interactive", priority=1, ttft_slo_s=0.5, tbt_slo_s=0.1, grade_weight=2.0),
             TenantSLO(name="batch", priority=0, ttft_slo_s=4.0, tbt_slo_s=0.5, grade_weight=1.0)),
    workload=WorkloadSpec(process="onoff", on_mean_s=6.0, off_mean_s=12.0, length_fit="azure_conv",
                          max_prompt_tokens=4096, max_output_tokens=1024,
                          tenant_shares=(0.4, 0.6), tenant_rate_profile=("modulated", "modulated"),
                          mega_prompt_rate_per_s=0.1, mega_prompt_tokens=12000,
                          mega_prompt_output_tokens=32, mega_prompt_tenant=1),
    cluster=ClusterOptions(replica_hardware=(("a100-80gb", 1),), capacity_rps=(3.4,),
                           load_fraction=0.75, burst_ratio=3.0),
    **_COMMON)))

# Prefix-sharing tasks: the replicas cache prompt prefixes (vLLM automatic prefix caching, on by
# default in the simulator), every request carries its prompt's hash chain, and the router sees
# the published cache state (three more columns, see envs/cluster_spaces.PREFIX_FEATURES).
register_task(_with_rates(TaskSpec(
    task_id="cluster_prefix_sharing",
    description="60 tenants' ~3k-token system prompts with Zipf(1.1) popularity on 4 Llama-2-7B/A100 "
                "replicas at 90% of capacity: a hot prompt pinned to one replica overloads it, spread "
                "everywhere it is prefilled over and over; locality and balance conflict.",
    difficulty="hard",
    tenants=_ONE_TENANT,
    workload=WorkloadSpec(process="prefix", max_prompt_tokens=8192, max_output_tokens=1024,
                          prefix=PrefixSharingSpec(preset="mooncake_shared_prefix", num_prefixes=60,
                                                   zipf_s=1.1, unique_share=0.05,
                                                   prefix_tokens=(3000.0, 0.3),
                                                   message_tokens=(150.0, 0.8),
                                                   output_tokens=(100.0, 0.8))),
    cluster=ClusterOptions(replica_hardware=(("a100-80gb", 1),), capacity_rps=(3.7,),
                           load_fraction=0.9),
    **_COMMON)))

register_task(_with_rates(TaskSpec(
    task_id="cluster_multiturn",
    description="Conversations on 4 Llama-2-7B/A100 replicas (each turn's prompt = the whole previous "
                "context + a new message, ~8 s think time, sessions end at the 4k context) and 30 "
                "shared system prompts: keeping a conversation where its context is cached against "
                "balancing the load.",
    difficulty="hard",
    tenants=_ONE_TENANT,
    workload=WorkloadSpec(process="prefix", max_prompt_tokens=4096, max_output_tokens=1024,
                          prefix=PrefixSharingSpec(preset="mooncake_multiturn", num_prefixes=30,
                                                   zipf_s=0.8, unique_share=0.3,
                                                   prefix_tokens=(1200.0, 0.4),
                                                   message_tokens=(120.0, 0.8),
                                                   unique_prompt_tokens=(800.0, 0.8),
                                                   output_tokens=(180.0, 0.7), turns=(5.0, 0.5),
                                                   think_time_s=(8.0, 0.5))),
    cluster=ClusterOptions(replica_hardware=(("a100-80gb", 1),), capacity_rps=(2.8,),
                           load_fraction=0.9),
    **_COMMON)))

# Issue 26: the CPU KV tier in a routing decision. Long Mooncake-like prompts (the shipped
# mooncake_shared_prefix fit, 60 shared documents so an episode reuses them; their lengths a
# lognormal of median 14k tokens, mean 15.5k as the Mooncake trace's prompts, whose tail stays under
# the 64k context: the fit's own tail, 30 % above 30k, would drop whole documents per episode and
# move the offered rate from seed to seed), a GPU cache too small
# for them (kv_budget_fraction 0.2: ~90k tokens, as in the Mooncake run of
# docs/bench/models_memory.md) and 100 GB of host memory per replica for the CPU tier. Capacity
# measured with the tier on (benchmarks/cluster_capacity.py).
register_task(_with_rates(TaskSpec(
    task_id="cluster_cpu_kv",
    description="Mooncake-like ~15k-token prompts over 60 shared documents on 4 Llama-3-8B/H100 "
                "replicas with a GPU prefix cache cut to ~90k tokens and a 100 GB CPU KV tier each "
                "(evicted blocks reloaded over PCIe): a host-memory hit is worth less than a GPU hit "
                "and more than a miss, and the best router changes with the tier.",
    difficulty="hard",
    tenants=(TenantSLO(name="default", priority=0, ttft_slo_s=2.0, tbt_slo_s=0.2),),
    workload=WorkloadSpec(process="prefix", max_prompt_tokens=65536, max_output_tokens=1024,
                          prefix=PrefixSharingSpec(preset="mooncake_shared_prefix", num_prefixes=60,
                                                   prefix_tokens=(14000.0, 0.45))),
    cluster=ClusterOptions(replica_hardware=(("h100-80gb", 1),), capacity_rps=(1.9,),
                           load_fraction=0.9, cpu_kv_gb=100.0),
    **{**_COMMON, "model": "llama-3-8b", "gpu": "h100-80gb", "chunk_size_tokens": 2048,
       "knobs": ReplicaKnobs(scheduler="sarathi", batch_cap=64, kv_budget_fraction=0.2,
                             speculation_depth=0)})))

CLUSTER_TASK_IDS: tuple[str, ...] = ("cluster_routing", "cluster_heterogeneous",
                                     "cluster_bursty_multitenant", "cluster_prefix_sharing",
                                     "cluster_multiturn", "cluster_cpu_kv")
PREFIX_TASK_IDS: tuple[str, ...] = ("cluster_prefix_sharing", "cluster_multiturn", "cluster_cpu_kv")
"""Cluster tasks whose requests share prompt prefixes (their router observation has the prefix columns)."""
