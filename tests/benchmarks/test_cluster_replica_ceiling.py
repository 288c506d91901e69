"""The per-replica, per-window lookahead ceiling (``benchmarks/cluster_replica_ceiling.py``, issue 21 item 4):
its candidate moves, and that the rollout algorithm's prediction is what the episode then does (env copies
exact) and never worse than the rule it starts from."""

from __future__ import annotations

from inferencegym.envs.cluster_spaces import KNOB_BUCKETS


def test_moves_change_one_knob_of_one_replica_or_the_same_on_all(bench_module):
    rc = bench_module("cluster_replica_ceiling")
    state = {f"replica_{i}": (0, 3, 1, 3) for i in range(3)}
    moves = rc.moves(state)
    names = [n for n, _ in moves]
    # batch cap 16 (lowest bucket) and KV 1.0 / chunk 2048 (highest) move one way; speculation both ways
    assert "replica_0:batch_cap=32" in names and "all:batch_cap=32" in names
    assert not any(n.endswith("batch_cap=8") for n in names)
    assert {"replica_2:speculation_depth=0", "replica_2:speculation_depth=4"} <= set(names)
    assert len(moves) == (1 + 1 + 2 + 1) * (3 + 1)
    for name, new in moves:
        changed = [(a, k) for a in state for k in range(4) if new[a][k] != state[a][k]]
        assert len(changed) == (3 if name.startswith("all:") else 1)
        assert all(0 <= new[a][k] < len(KNOB_BUCKETS[k]) for a, k in changed)


def test_prediction_is_the_played_episode_and_never_worse_than_the_rule(bench_module):
    rc = bench_module("cluster_replica_ceiling")
    ep = rc.replica_ceiling_episode("cluster_prefix_sharing", 1000, block=2, objective="p90",
                                    episode_windows=4, log=lambda *_: None)
    assert ep["ceiling"] == ep["predicted"]  # the copies were exact: the chosen rollout is what happened
    assert ep["ceiling"]["p90"] <= ep["base"]["p90"]
    assert ep["ceiling"]["thr"] >= 0.99 * ep["base"]["thr"] or ep["ceiling"] == ep["base"]
    assert ep["rollouts"] > 1 and set(ep["final_knobs"]) == {f"replica_{i}" for i in range(4)}


def test_router_weight_moves_alone_keep_the_knobs(bench_module):
    rc = bench_module("cluster_replica_ceiling")
    ep = rc.replica_ceiling_episode("cluster_prefix_sharing", 1001, block=2, objective="p90", episode_windows=4,
                                    log=lambda *_: None, weights=(0.02, 1.0), knob_moves=False)
    assert ep["ceiling"] == ep["predicted"] and ep["ceiling"]["p90"] <= ep["base"]["p90"]
    assert all(name.startswith("router affinity") for _, name in ep["choices"])
    switched_first = any(w == 0 for w, _ in ep["choices"])
    # the start, then both weights at the first decision, then the weights other than the router's own
    assert ep["rollouts"] == 1 + 2 + (1 if switched_first else 2)
