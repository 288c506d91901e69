"""ServeAction, the Dict space and the flat MultiDiscrete encoding."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.envs.actions import (
    FLAT_BUCKETS,
    FLAT_NVEC,
    InvalidActionError,
    ServeAction,
    action_space,
    action_to_flat,
    flat_to_action,
)


def test_defaults_are_vllm_like():
    a = ServeAction()
    assert (a.batch_cap, a.kv_budget_fraction, a.speculation_depth, a.quantization_tier) == (256, 0.9, 0, "FP16")
    assert not a.prefill_decode_split and not a.priority_routing


def test_every_space_sample_round_trips():
    space = action_space()
    space.seed(3)
    for _ in range(200):
        s = space.sample()
        a = ServeAction.from_any(s)
        back = a.to_space_sample()
        assert space.contains(back)
        assert ServeAction.from_any(back) == a


@pytest.mark.parametrize("bad, needle", [
    ({"batch_cap": 0}, "batch_cap"),
    ({"batch_cap": 513}, "batch_cap"),
    ({"batch_cap": 3.5}, "batch_cap"),
    ({"kv_budget_fraction": 0.05}, "kv_budget_fraction"),
    ({"kv_budget_fraction": 1.5}, "kv_budget_fraction"),
    ({"speculation_depth": 9}, "speculation_depth"),
    ({"quantization_tier": "FP8"}, "quantization_tier"),
    ({"quantization_tier": 3}, "quantization_tier"),
    ({"prefill_decode_split": 2}, "prefill_decode_split"),
    ({"bogus": 1}, "bogus"),
    ({"kv_budget_fraction": np.array([0.5, 0.6])}, "kv_budget_fraction"),
])
def test_invalid_actions_name_the_field(bad, needle):
    with pytest.raises(InvalidActionError) as exc:
        ServeAction.from_any(bad)
    assert needle in str(exc.value)


def test_non_mapping_action_is_rejected_clearly():
    with pytest.raises(InvalidActionError, match="ServeAction or a dict"):
        ServeAction.from_any(42)


def test_numpy_values_and_lowercase_tier_are_accepted():
    a = ServeAction.from_any({"batch_cap": np.int64(7), "kv_budget_fraction": np.array([0.5], np.float32),
                              "quantization_tier": "int8", "priority_routing": np.int64(1)})
    assert a.batch_cap == 7 and a.quantization_tier == "INT8" and a.priority_routing is True
    assert abs(a.kv_budget_fraction - 0.5) < 1e-6


def test_flat_encoding_covers_every_bucket():
    assert FLAT_NVEC == (8, 10, 5, 3, 2, 2)
    for i, (name, buckets) in enumerate(FLAT_BUCKETS.items()):
        for j, value in enumerate(buckets):
            vec = np.zeros(len(FLAT_NVEC), dtype=np.int64)
            vec[i] = j
            a = flat_to_action(vec)
            assert getattr(a, name) == value
            assert action_to_flat(a)[i] == j


def test_flat_out_of_range_is_rejected():
    with pytest.raises(InvalidActionError, match="component 0"):
        flat_to_action(np.array([8, 0, 0, 0, 0, 0]))
    with pytest.raises(InvalidActionError, match="length 6"):
        flat_to_action(np.array([0, 0, 0]))


def test_every_baseline_table_value_is_a_flat_bucket():
    """A flat-action policy can play exactly what best_static, the clairvoyant and phase_rule play."""
    import json
    from importlib import resources

    for name in ("best_static.json", "clairvoyant.json", "phase_rule.json"):
        text = resources.files("inferencegym").joinpath("data", name).read_text()

        def walk(node):
            if isinstance(node, dict):
                if "kv_budget_fraction" in node and "batch_cap" in node:
                    yield node
                for v in node.values():
                    yield from walk(v)
            elif isinstance(node, list):
                for v in node:
                    yield from walk(v)

        for action in walk(json.loads(text)):
            a = ServeAction(**action)
            assert flat_to_action(action_to_flat(a)) == a, (name, action)
