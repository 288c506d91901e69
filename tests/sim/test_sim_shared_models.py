"""What makes a knob switch and a reset cheap changes no answer: clusters share their execution
models across resets (``ExecutionModel.shared_preset``: one per distinct set of constructor
inputs, its memos warm), a replica config is rebuilt without ``dataclasses.replace`` (the same
fields and checks), and the acceptance thresholds of a longer table extend a shorter one's."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from inferencegym.sim.cluster import Cluster
from inferencegym.sim.config import ClusterConfig, ReplicaConfig
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.knobs import changed_configs
from inferencegym.sim.request import Request
from inferencegym.sim.spec_draws import draw_table, thresholds


def test_a_shared_model_is_one_instance_per_set_of_inputs_and_answers_as_a_fresh_one():
    a = ExecutionModel.shared_preset(model="llama-2-7b", gpu="a100-80gb")
    assert ExecutionModel.shared_preset(model="llama-2-7b", gpu="a100-80gb") is a
    assert ExecutionModel.shared_preset(model="llama-2-7b", gpu="h100-80gb") is not a
    fresh = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb")
    assert fresh is not a and fresh is not ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb")
    for B, k in ((1, 0), (7, 3), (64, 5), (200, 8)):
        a.decode_coeffs(B, k)  # warm the shared memo first
        assert [x.hex() for x in a.decode_coeffs(B, k)] == [x.hex() for x in fresh.decode_coeffs(B, k)]
        assert a.iteration_time_s([(300, 40)], B, 900 * B, k).hex() == \
            fresh.iteration_time_s([(300, 40)], B, 900 * B, k).hex()
    # its quantization tiers are shared too, and equal the unshared model's tiers
    q = a.with_quantization("int4")
    assert a.with_quantization("int4") is q and fresh.with_quantization("int4") is not q
    assert q.decode_coeffs(33, 2) == fresh.with_quantization("int4").decode_coeffs(33, 2)


def _run(seed: int) -> tuple:
    cfg = ClusterConfig(replica=ReplicaConfig(speculation_depth=3, scheduler="sarathi"), num_replicas=2)
    cl = Cluster(cfg, rng=np.random.default_rng(seed))
    rng = np.random.default_rng(100 + seed)
    t, reqs = 0.0, []
    for i in range(150):
        t += float(rng.exponential(0.02))
        reqs.append(Request(req_id=i, arrival_s=t, prompt_tokens=int(rng.integers(20, 900)),
                            output_tokens=int(rng.integers(5, 300))))
    cl.submit(reqs)
    cl.run_until(1.0)
    cl.apply_replica_config(None, quantization="int8", speculation_depth=5, batch_cap=40)
    cl.run_until(3.0)
    cl.apply_replica_config(None, quantization="fp16", speculation_depth=1, kv_budget_fraction=0.7)
    cl.run_until(60.0)
    return cl, tuple((r.req_id, r.generated_tokens, r.first_token_s, r.tbt_max_s) for r in cl.requests)


def test_clusters_built_alike_share_their_models_and_run_as_with_fresh_ones():
    cl1, first = _run(0)
    cl2, again = _run(0)
    assert cl2.base_model is cl1.base_model  # shared: the second run starts with warm memos
    assert again == first
    fresh = Cluster(ClusterConfig(replica=ReplicaConfig(speculation_depth=3, scheduler="sarathi"),
                                  num_replicas=2), rng=np.random.default_rng(0),
                    execution_model=ExecutionModel.from_preset())
    assert fresh.base_model is not cl1.base_model


@pytest.mark.parametrize("knobs", [
    dict(batch_cap=77, kv_budget_fraction=0.7123, speculation_depth=3, quantization="int8"),
    dict(speculation_depth=2.0),  # an equal value of another type: replace's config equals cur
    dict(scheduler="sarathi", chunk_size=256, watermark_fraction=0.02),
])
def test_a_changed_config_is_what_dataclasses_replace_gives(knobs):
    cur = ReplicaConfig(speculation_depth=2)
    out = changed_configs([(0, cur)], knobs)
    want = dataclasses.replace(cur, **knobs)
    if want == cur:  # no change (dataclass equality, as the generic path decides it)
        assert out == []
        return
    assert [(i, c) for i, c, _ in out] == [(0, cur)]
    new = out[0][2]
    assert new == want and new.__dict__ == want.__dict__ and list(new.__dict__) == list(want.__dict__)
    assert all(type(getattr(new, k)) is type(getattr(want, k)) for k in new.__dict__)


def test_an_unchanged_config_is_no_change_and_a_bad_one_the_one_line_error():
    cur = ReplicaConfig(speculation_depth=2, batch_cap=64)
    assert changed_configs([(0, cur)], dict(speculation_depth=2, batch_cap=64)) == []
    assert changed_configs([(0, cur)], dict(batch_cap=64.0)) == []  # equal: replace's config equals cur
    with pytest.raises(ValueError, match="kv_budget_fraction must be in"):
        changed_configs([(0, cur)], dict(kv_budget_fraction=1.5))
    with pytest.raises(ValueError, match="speculation_depth must be in 0..8"):
        changed_configs([(0, cur)], dict(speculation_depth=9))


@pytest.mark.parametrize("alpha", [0.35, 0.7, 0.93])
def test_thresholds_of_a_longer_table_extend_a_shorter_ones(alpha):
    lg = math.log(alpha)
    assert thresholds(lg, 3) + thresholds(lg, 8, 4) == thresholds(lg, 8)
    for kmax in (3, 9, 5, 2):  # depth switches, shorter after longer
        tb = draw_table(lg, kmax)
        edges = []
        for t in thresholds(lg, kmax - 1):
            edges += (t - 1e-9, t + 1e-9)
        assert tb is not None and tb[5] == tuple(edges)
