"""The random baseline's cheaper draws are the draws of the plain ``Generator`` calls: the same
actions, and the Generator left in the same state, step after step (its seeded results stay)."""

from __future__ import annotations

import numpy as np

from inferencegym.envs.actions import (
    BATCH_CAP_MAX,
    KV_FRACTION_MAX,
    KV_FRACTION_MIN,
    QUANTIZATION_TIERS,
    SPECULATION_MAX,
)
from inferencegym.policies.baselines import RandomPolicy


def _plain_action(r: np.random.Generator) -> tuple:
    """The action as the plain calls draw it (the policy's definition)."""
    return (int(r.integers(1, BATCH_CAP_MAX + 1)),
            float(r.uniform(KV_FRACTION_MIN, KV_FRACTION_MAX)),
            int(r.integers(0, SPECULATION_MAX + 1)),
            QUANTIZATION_TIERS[int(r.integers(0, len(QUANTIZATION_TIERS)))],
            bool(r.integers(0, 2)),
            bool(r.integers(0, 2)))


def test_the_random_policy_draws_what_the_plain_generator_calls_draw():
    for seed in (0, 1, 7, 12345):
        pol = RandomPolicy("static_workload", seed=seed)
        ref = np.random.default_rng(seed)
        seen_depths, seen_tiers = set(), set()
        for _ in range(2000):
            a = pol.act(None)
            want = _plain_action(ref)
            got = (a.batch_cap, a.kv_budget_fraction, a.speculation_depth, a.quantization_tier,
                   a.prefill_decode_split, a.priority_routing)
            assert got[0] == want[0] and got[2:] == want[2:]
            assert float(got[1]).hex() == want[1].hex()  # the same double, bit for bit
            assert type(got[0]) is int and type(got[1]) is float and type(got[2]) is int
            seen_depths.add(a.speculation_depth)
            seen_tiers.add(a.quantization_tier)
        assert seen_depths == set(range(SPECULATION_MAX + 1)) and seen_tiers == set(QUANTIZATION_TIERS)
        # the Generator is left where the plain calls leave it
        assert pol._rng.bit_generator.state == ref.bit_generator.state
        assert pol._rng.random() == ref.random()


def test_reset_reseeds_the_stream():
    pol = RandomPolicy("static_workload", seed=3)
    first = [pol.act(None) for _ in range(5)]
    pol.reset(seed=3)
    assert [pol.act(None) for _ in range(5)] == first
