"""Prefix-sharing episode workloads, the prefix cluster tasks, their router columns and baselines."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from fakes.routing import route_through_env
from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.envs.cluster_spaces import COL, PREFIX_FEATURES, ROUTER_FEATURES
from inferencegym.policies import is_privileged
from inferencegym.policies.routers import PRODUCTION_ROUTERS, ROUTER_POLICIES, get_cluster_policy
from inferencegym.tasks.adapter import build_requests, make_cluster
from inferencegym.tasks.cluster import CLUSTER_TASK_IDS, PREFIX_TASK_IDS
from inferencegym.tasks.episode_workload import generate_episode_workload, mean_output_tokens
from inferencegym.tasks.prefix_workload import generator_spec, lognormal_table
from inferencegym.tasks.spec import PrefixSharingSpec, WorkloadSpec, get_task, task_ids

# sha256 prefixes of every request (id, arrival, lengths, tenant, priority, block hashes) of each
# task's episode at seed 123, recorded on the commit before prefix-sharing workloads were added;
# the cluster tasks' rates re-recorded after issue 23 re-measured their replicas' capacity, and
# cluster_heterogeneous's again after its H100 GEMM refit (H100 TP2 capacity 10.6 -> 11.7 req/s), and
# all three after the vllm-v1 GPU-side step terms (issue 23, fifth session: A100 3.5 -> 3.4, H100 TP2
# 11.7 -> 12.3 req/s; the bursty task's on/off draws follow its rate, so its count moves more).
BEFORE = {"cluster_routing": (1325, "5d7de634efe78e4d"),
          "cluster_heterogeneous": (3044, "fda17aae7de08d63"),
          "cluster_bursty_multitenant": (1055, "1d191862da428202"),
          "static_workload": (1138, "5fda0b67aa954890"),  # at its 5.6 req/s (issue 15: vllm-v1)
          "bursty_workload": (704, "ca2ab8c0ddfc7c65"),  # 1.9 / 7.6 req/s (vllm-v1)
          "adversarial_multitenant": (660, "9f055a1d1ea98c7d")}  # at its 3.4 req/s (vllm-v1)


def _digest(reqs) -> str:
    h = hashlib.sha256()
    for r in reqs:
        h.update(repr((r.req_id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.tenant, r.priority,
                       tuple(r.block_hashes))).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("tid", sorted(BEFORE))
def test_existing_tasks_draw_bit_identical_requests(tid):
    t = get_task(tid)
    reqs = build_requests(t, t.episode_s, np.random.default_rng(123))
    assert (len(reqs), _digest(reqs)) == BEFORE[tid]


def test_every_task_without_prefix_keeps_twelve_columns_and_prefix_tasks_get_fifteen():
    shipped = {t for t in task_ids() if not t.startswith("_")}  # other tests register "_test..." tasks
    assert set(PREFIX_TASK_IDS) <= set(CLUSTER_TASK_IDS) and set(BEFORE) | set(PREFIX_TASK_IDS) == shipped
    for tid in CLUSTER_TASK_IDS:
        env = ClusterEnv({"task_id": tid, "episode_windows": 1})
        F = len(ROUTER_FEATURES) + (len(PREFIX_FEATURES) if tid in PREFIX_TASK_IDS else 0)
        assert env.observation_spaces["router"]["replicas"].shape == (env.n, F)
        assert env.observation_spaces["replica_0"].shape == (2 * F + 6,)
    assert [COL[c] for c in ROUTER_FEATURES] == list(range(12))


@pytest.mark.parametrize("tid", PREFIX_TASK_IDS)
def test_prefix_episodes_are_seeded_and_carry_hash_chains(tid):
    t = get_task(tid)
    a = build_requests(t, 20.0, np.random.default_rng(5))
    b = build_requests(t, 20.0, np.random.default_rng(5))
    c = build_requests(t, 20.0, np.random.default_rng(6))
    assert _digest(a) == _digest(b) != _digest(c)
    assert all(r.arrival_s <= 20.0 for r in a)
    assert np.all(np.diff([r.arrival_s for r in a]) >= 0)
    w = t.workload
    assert all(1 <= r.prompt_tokens <= w.max_prompt_tokens and 1 <= r.output_tokens <= w.max_output_tokens
               for r in a)
    with_chain = [r for r in a if r.block_hashes]
    assert len(with_chain) > 0.8 * len(a)
    for r in with_chain:  # whole 16-token blocks of the prompt, never more
        assert len(r.block_hashes) <= r.prompt_tokens // 16
    # sharing: a large share of the prompt blocks were sent before (what a prefix cache can hit)
    seen, blocks, again = set(), 0, 0
    for r in with_chain:
        blocks += len(r.block_hashes)
        again += sum(h in seen for h in r.block_hashes)
        seen.update(r.block_hashes)
    assert again > 0.25 * blocks
    if w.prefix.unique_share is not None and w.prefix.unique_share <= 0.3:
        # and most requests start with a block another request started with (cluster_cpu_kv's
        # Mooncake fit has 45 % unique prompts, so only its long shared documents repeat)
        firsts = [r.block_hashes[0] for r in with_chain]
        assert len(set(firsts)) < 0.5 * len(firsts)


def test_multiturn_turns_extend_the_previous_context():
    t = get_task("cluster_multiturn")
    w = generate_episode_workload(dataclasses.replace(t, episode_windows=30), np.random.default_rng(2))
    assert w.hash_ids is not None and len(w.hash_ids) == len(w)
    chains = [tuple(h.tolist()) for h in w.hash_ids]
    # a later turn's chain starts with an earlier request's whole chain (its full blocks)
    longer = 0
    seen = {}
    for ch in chains:
        for k in range(len(ch) - 1, 0, -1):
            if ch[:k] in seen:
                longer += 1
                break
        for k in range(1, len(ch) + 1):
            seen.setdefault(ch[:k], True)
    assert longer > 0.5 * len(chains)


def test_prefix_spec_overrides_and_errors():
    p = PrefixSharingSpec(preset="mooncake_shared_prefix", num_prefixes=7, zipf_s=1.3, unique_share=0.0,
                          prefix_tokens=(1000.0, 0.2), output_tokens=(50.0, 0.5))
    g = generator_spec(WorkloadSpec(process="prefix", prefix=p, rate_rps=3.0, max_output_tokens=64))
    assert (g.num_prefixes, g.zipf_s, g.unique_share, g.block_tokens) == (7, 1.3, 0.0, 16)
    assert g.prefix_tokens == lognormal_table(1000.0, 0.2)
    assert max(g.output_tokens) == 64.0 and g.prefix_tokens[12] == pytest.approx(1000.0)
    assert 0 < mean_output_tokens(WorkloadSpec(process="prefix", prefix=p, max_output_tokens=64)) <= 64
    with pytest.raises(ValueError, match="preset must be one of"):
        PrefixSharingSpec(preset="nope")
    with pytest.raises(ValueError, match="median > 0, sigma >= 0"):
        PrefixSharingSpec(prefix_tokens=(0.0, 1.0))
    with pytest.raises(ValueError, match="unique_share"):
        PrefixSharingSpec(unique_share=1.5)
    with pytest.raises(ValueError, match="process='prefix' needs prefix"):
        WorkloadSpec(process="prefix")
    with pytest.raises(ValueError, match="process='prefix' needs prefix"):
        WorkloadSpec(process="poisson", prefix=p)


def test_prefix_columns_show_the_published_cache():
    env = ClusterEnv({"task_id": "cluster_prefix_sharing", "episode_windows": 4})
    pol = get_cluster_policy("llmd_precise").bind(env)
    pol.reset(0)
    obs, infos = env.reset(seed=3)
    shares, occ, hits = [], [], []
    while True:
        if "router" in obs and env.pending_request is not None:
            f = obs["router"]["replicas"]
            shares.append(f[:, COL["cached_share"]].copy())
            occ.append(f[:, COL["cache_occupancy"]].copy())
            hits.append(f[:, COL["recent_hit_rate"]].copy())
            # what the column says is what the published view credits
            req = env.pending_request
            for i in range(env.n):
                want = env.cluster.published_cached_tokens(i, req) / req.prompt_tokens
                assert f[i, COL["cached_share"]] == pytest.approx(want, abs=1e-6)
        obs, _, _, trunc, infos = env.step(pol.act_all(obs, infos))
        if trunc["__all__"]:
            break
    shares, occ, hits = np.array(shares), np.array(occ), np.array(hits)
    for a in (shares, occ, hits):
        assert a.min() >= 0.0 and a.max() <= 1.0
    assert shares.max() > 0.5 and occ[-1].min() > 0.0 and hits[-1].max() > 0.3
    assert shares[0].max() == 0.0  # nothing is cached at the first decision


@pytest.mark.parametrize("router", [*PRODUCTION_ROUTERS, "prefix_oracle"])
def test_production_router_adapters_reproduce_the_simulators_routing(router):
    """The env-side adapter of each cache-aware router routes exactly like the simulator's own run
    (the prefix columns read the published view without changing what the routers see)."""
    env = route_through_env("cluster_prefix_sharing", router, windows=4, seed=11)
    via_env = [r.replica_id for r in env.requests]
    wl_ss, sim_ss, _ = np.random.SeedSequence(11).spawn(3)
    reqs = build_requests(env.task, env.task.episode_s, np.random.default_rng(wl_ss))
    cl = make_cluster(env.task, np.random.default_rng(sim_ss), router=router)
    cl.submit(reqs)
    cl.run_until(env.task.episode_s)
    assert [r.replica_id for r in reqs] == via_env
    assert sum(r.cached_tokens for r in reqs) > 0


def test_every_production_router_is_a_baseline_and_the_oracle_is_privileged():
    assert set(PRODUCTION_ROUTERS) <= set(ROUTER_POLICIES)
    assert "prefix_oracle" in ROUTER_POLICIES and is_privileged("prefix_oracle")
    assert not any(is_privileged(p) for p in PRODUCTION_ROUTERS)


@pytest.mark.parametrize("tid", PREFIX_TASK_IDS)
def test_prefix_tasks_offer_their_nominal_request_rate_throughout(tid):
    """rate_rps (load_fraction x capacity) is the rate an episode really offers: sessions start
    before t = 0 and the session rate accounts for turns cut at the context limit."""
    t = get_task(tid)
    arr = np.concatenate([[r.arrival_s for r in build_requests(t, t.episode_s, np.random.default_rng(k))]
                          for k in range(4)])
    per_third = np.histogram(arr, bins=3, range=(0.0, t.episode_s))[0] / 4 / (t.episode_s / 3)
    assert per_third == pytest.approx(np.full(3, t.workload.rate_rps), rel=0.12)


def test_attention_router_builds_on_the_fifteen_columns_and_acts_in_the_env():
    """The cross-replica attention module takes the prefix tasks' 15 columns as built from the env's
    spaces (what ``pretrained:`` and training do) and returns an allowed replica."""
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import ReplicaAttentionRouter

    env = ClusterEnv({"task_id": "cluster_prefix_sharing", "episode_windows": 2})
    m = RLModuleSpec(module_class=ReplicaAttentionRouter, observation_space=env.observation_spaces["router"],
                     action_space=env.action_spaces["router"], model_config={}).build()
    obs, _ = env.reset(seed=0)
    o = obs["router"]
    batch = {k: torch.as_tensor(np.asarray(v, dtype=np.float32))[None] for k, v in o.items()}
    with torch.no_grad():
        logits = m.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
    assert logits.shape == (1, env.n)
    a = int(torch.argmax(logits))
    assert o["action_mask"][a] == 1.0
    env.step({"router": a})
