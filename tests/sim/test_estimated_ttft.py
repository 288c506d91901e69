"""Estimated time to first token (inferencegym.sim.estimates), the ``estimated_ttft`` router and
the cluster env's ``est_ttft`` router feature."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from inferencegym.envs.cluster_env import ROUTER, ROUTER_FEATURES, ClusterEnv
from inferencegym.evaluation.cluster import evaluate_cluster_policy
from inferencegym.policies.routers import get_router_policy
from inferencegym.sim.estimates import first_token_iterations
from inferencegym.sim.request import Request

COL = ROUTER_FEATURES.index("est_ttft")


def _req(prompt, out, generated=0, prefilled=None):
    """A request in the given state (a real ``Request``: compiled, the estimate reads its
    attributes natively and checks its class)."""
    r = Request(req_id=0, arrival_s=0.0, prompt_tokens=prompt, output_tokens=out)
    r.generated_tokens = generated
    r.prefill_target = prompt
    r.prefilled_tokens = prompt if prefilled is None else prefilled
    return r


def _rep(cap, running=(), waiting=(), chunk=100):
    return SimpleNamespace(cfg=SimpleNamespace(chunk_size=chunk, batch_cap=cap), running=list(running),
                           waiting=list(waiting), prio_waiting=[])


def test_estimate_by_hand():
    # a free slot: only the prefill work ahead (50 left of a running prompt) and its own 200 tokens
    rep = _rep(2, running=[_req(300, 10, prefilled=250)])
    assert first_token_iterations(rep, 200, expected_output_tokens=None) == pytest.approx((50 + 200) / 100)
    # full batch: wait for the first slot (the request with 5 tokens left), then prefill
    rep = _rep(1, running=[_req(100, 30, generated=25)])
    assert first_token_iterations(rep, 100, expected_output_tokens=None) == pytest.approx(5 + 1)
    # without output lengths the remaining output is the expectation given (here 40)
    assert first_token_iterations(rep, 100, expected_output_tokens=40.0) == pytest.approx(40 + 1)
    # a queued request takes the slot first: 5 (slot) + 1 (its prefill) + 7 (its output) + 2 prefills
    rep = _rep(1, running=[_req(100, 30, generated=25)], waiting=[_req(100, 7, prefilled=0)])
    assert first_token_iterations(rep, 100, expected_output_tokens=None) == pytest.approx(5 + 1 + 7 + 2)


def test_feature_is_the_routers_estimate_and_routing_by_it_is_estimated_ttft():
    env = ClusterEnv({"task_id": "cluster_heterogeneous", "seed": 5})
    router = get_router_policy("estimated_ttft").bind(env)
    obs, _ = env.reset(seed=5)
    checked = 0
    for _ in range(300):
        if ROUTER not in obs:
            obs, *_ = env.step({})
            continue
        o = obs[ROUTER]
        req = env.pending_request
        feat = o["replicas"][:, COL]
        assert np.all(feat >= 0)
        allowed = np.flatnonzero(o["action_mask"] > 0.5)
        choice = router.act(o)
        assert feat[choice] <= feat[allowed].min() * (1 + 1e-5) + 1e-6  # float32 feature
        assert req is env.pending_request  # acting does not advance the env
        obs, *_ = env.step({ROUTER: choice})
        checked += 1
    assert checked > 100


def test_estimated_ttft_beats_least_outstanding_on_heterogeneous_replicas():
    """Mixed H100/A100 replicas: counting requests ignores that an H100 drains its queue ~2x faster."""
    kw = dict(episodes=3, seed=1000)
    lor = evaluate_cluster_policy("least_outstanding_requests", "cluster_heterogeneous", **kw)
    est = evaluate_cluster_policy("estimated_ttft", "cluster_heterogeneous", **kw)
    d = [r if isinstance(r, dict) else r.to_dict() for r in (lor, est)]
    assert d[1]["ttft_p99_s"] < 0.9 * d[0]["ttft_p99_s"]
    assert d[1]["score_mean"] >= d[0]["score_mean"] - 0.01
    for r in d:  # p90 reported per seed too (issue 14's goal is on p90 or p99), below the p99
        assert len(r["per_seed"]["ttft_p90_s"]) == 3 and r["ttft_p90_s"] <= r["ttft_p99_s"]
        assert all(a <= b for a, b in zip(r["per_seed"]["ttft_p90_s"], r["per_seed"]["ttft_p99_s"]))


@pytest.mark.parametrize("task_id", ["cluster_prefix_sharing", "cluster_multiturn"])
def test_feature_credits_published_cached_prefix_tokens_like_the_router(task_id):
    """Issue 21: on the prefix tasks the column credits the published cached tokens exactly as the
    ``estimated_ttft`` rule does, so the rule's choice is always an argmin of the column (before the
    fix the column ignored the cache and disagreed with the rule on hot-prefix arrivals)."""
    env = ClusterEnv({"task_id": task_id, "episode_windows": 8})
    router = get_router_policy("estimated_ttft").bind(env)
    obs, _ = env.reset(seed=3)
    checked = credited = 0
    while True:
        if ROUTER not in obs:
            obs, _, _, truncs, _ = env.step({})
        else:
            o = obs[ROUTER]
            feat = o["replicas"][:, COL]
            allowed = np.flatnonzero(o["action_mask"] > 0.5)
            choice = router.act(o)
            assert feat[choice] <= feat[allowed].min() * (1 + 1e-5) + 1e-6
            req = env.pending_request
            cached = [env.cluster.published_cached_tokens(i, req) for i in range(env.n)]
            credited += max(cached) > 0
            checked += 1
            obs, _, _, truncs, _ = env.step({ROUTER: choice})
        if truncs["__all__"]:
            break
    assert checked > 50 and credited > checked // 4  # the cache was in play on many decisions
