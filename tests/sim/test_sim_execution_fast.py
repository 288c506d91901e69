"""The compiled iteration time (``sim/execution_fast.py``) is ``ExecutionModel.iteration_time_s``
bit for bit, on every engine profile and proposer it covers, and declines the models it does not."""

from __future__ import annotations

import random

import pytest

from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_fast import iteration_costs
from inferencegym.sim.fleet_ops import SlowModel

COVERED = [
    dict(model="llama-2-7b", gpu="a100-80gb"),  # vllm-v1: async scheduling, CUDA graphs, a draft model
    dict(model="llama-2-7b", gpu="a100-80gb", engine_profile="vllm-v0"),  # synchronous, batch expansion
    dict(model="llama-2-7b", gpu="h100-80gb", engine_profile="vllm-2023"),
    dict(model="llama-2-7b", gpu="a100-80gb", engine_profile="kernel-only"),
    dict(model="llama-3-8b", gpu="h100-80gb", draft_model="ngram"),
    dict(model="llama-3-8b", gpu="h100-80gb", draft_model="eagle", quantization="fp8"),
    dict(model="llama-3-70b", gpu="h100-80gb", tensor_parallel=4, draft_model=None),
    dict(model="qwen3-30b-a3b", gpu="h100-80gb", tensor_parallel=2, expert_parallel=2),  # MoE
]


def _batches(rng: random.Random, n: int):
    for _ in range(n):
        npf = rng.choice([0, 0, 1, 1, 2, 4])
        pf = [(rng.randint(1, 2048), rng.choice([0, rng.randint(0, 60_000)])) for _ in range(npf)]
        B = rng.choice([0, 1, 3, 17, 64, 255]) if npf else rng.choice([1, 3, 17, 64, 255])
        S = rng.randint(B, 400_000) if B else 0
        yield pf, B, S


@pytest.mark.parametrize("kw", COVERED, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_fast_iteration_time_is_the_models_float_for_float(kw):
    m = ExecutionModel.from_preset(**kw)
    fast = iteration_costs(m)
    assert fast is not None, "a plain one-stage model without sliding windows is covered"
    rng = random.Random(repr(sorted(kw.items())))
    depths = [0] if m.spec_method is None else [0, 1, 3, 5]
    for pf, B, S in _batches(rng, 400):
        for k in depths:
            kk = k if B else 0
            want = m.iteration_time_s(pf, B, S, kk)
            got = fast.time(pf, B, S, kk)
            assert got == want and float(got).hex() == float(want).hex(), (kw, pf, B, S, kk, got, want)


def test_without_a_proposer_a_speculative_step_raises_the_models_error():
    m = ExecutionModel.from_preset("llama-2-7b", "a100-80gb", draft_model=None)
    fast = iteration_costs(m)
    assert fast is not None
    with pytest.raises(ValueError) as want:
        m.iteration_time_s([(16, 0)], 4, 400, 2)
    with pytest.raises(ValueError) as got:
        fast.time([(16, 0)], 4, 400, 2)
    assert str(got.value) == str(want.value)


def test_models_it_does_not_cover_keep_their_own_method():
    base = ExecutionModel.from_preset("llama-2-7b", "a100-80gb")
    assert iteration_costs(SlowModel(base, 2.0)) is None  # a wrapper: its own iteration_time_s
    assert iteration_costs(ExecutionModel.from_preset("gpt-oss-120b", "h100-80gb", tensor_parallel=2,
                                                      quantization="mxfp4", draft_model=None)) is None  # sliding windows
    assert iteration_costs(ExecutionModel.from_preset("llama-2-7b", "a100-80gb", pipeline_parallel=2,
                                                      draft_model=None)) is None  # pipeline stages


def test_a_replica_follows_its_model_when_it_changes():
    from inferencegym.sim.cluster import Cluster
    from inferencegym.sim.config import ClusterConfig

    cl = Cluster(ClusterConfig())
    rep = cl.replicas[0]
    m = rep.model
    pf = [(100, 50)]
    assert rep._iter_time(pf, 3, 300, 0) == m.iteration_time_s(pf, 3, 300, 0)
    rep.model = SlowModel(m, 3.0)  # (sim/fleet_ops.set_slowdown does this)
    assert rep._iter_time(pf, 3, 300, 0) == m.iteration_time_s(pf, 3, 300, 0) * 3.0
    rep.model = m
    assert rep._iter_time(pf, 3, 300, 0) == m.iteration_time_s(pf, 3, 300, 0)
