"""The compiled evaluator's memo misses (``sim/execution_fast.py``): decode coefficients, token-count
and LM-head times and the proposer's pass coefficients computed there are the model's own floats,
bit for bit, on every engine profile and proposer, and land in the model's memo dictionaries."""

from __future__ import annotations

import random

import pytest

from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_fast import iteration_costs

PROFILES = [
    dict(model="llama-2-7b", gpu="a100-80gb"),  # vllm-v1: async scheduling, CUDA graphs, a draft model
    dict(model="llama-2-7b", gpu="a100-80gb", engine_profile="vllm-v0"),  # synchronous, batch expansion
    dict(model="llama-2-7b", gpu="h100-80gb", engine_profile="vllm-2023"),
    dict(model="llama-2-7b", gpu="a100-80gb", engine_profile="kernel-only"),
    dict(model="llama-2-7b", gpu="a100-80gb", quantization="int4"),
    dict(model="llama-2-7b", gpu="a100-80gb", quantization="int8"),
    dict(model="llama-3-8b", gpu="h100-80gb", draft_model="ngram"),
    dict(model="llama-3-8b", gpu="h100-80gb", draft_model="ngram", engine_profile="vllm-v0"),
    dict(model="llama-3-8b", gpu="h100-80gb", draft_model="eagle", quantization="fp8"),
    dict(model="llama-3-70b", gpu="h100-80gb", tensor_parallel=4),  # all-reduce terms
    dict(model="llama-3-70b", gpu="h100-80gb", tensor_parallel=4, draft_model=None),
    dict(model="qwen3-30b-a3b", gpu="h100-80gb", tensor_parallel=2, expert_parallel=2),  # MoE: the model's token times
]
_IDS = ["-".join(str(v) for v in kw.values()) for kw in PROFILES]


def _hex(x) -> tuple:
    return tuple(float(v).hex() for v in x) if isinstance(x, tuple) else (float(x).hex(),)


def _queries(seed: str, n: int = 300):
    rng = random.Random(seed)
    for _ in range(n):
        yield rng.choice([0, 1, 2, 3, 7, 17, 64, 100, 255, 256, 300, rng.randint(1, 600)]), rng.randint(0, 8)


@pytest.mark.parametrize("kw", PROFILES, ids=_IDS)
def test_cold_misses_are_the_models_floats(kw):
    ref = ExecutionModel.from_preset(**kw)  # a fresh model answers every query through its own methods
    m = ExecutionModel.from_preset(**kw)  # a second fresh model whose misses the evaluator computes
    fast = iteration_costs(m)
    assert fast is not None
    assert (fast.tok_terms is None) == (m._moe is not None)  # dense: computed by the evaluator
    spec = m.spec_method is not None
    asked = 0
    for B, k in _queries(repr(sorted(kw.items()))):
        k = k if spec else 0
        got = fast.coeffs(B, k)
        want = ref.decode_coeffs(B, k)
        assert _hex(got) == _hex(want), (kw, B, k, got, want)
        assert m._coeff_cache[(B, k)] is got  # stored in the model's own memo: the model answers it too
        assert m.decode_coeffs(B, k) is got
        asked += 1
        n = B * (k + 1)
        assert _hex(fast._token_time(n)) == _hex(ref._token_time(n)), (kw, n)
        assert _hex(fast._lm_head_time(n + 1)) == _hex(ref._lm_head_time(n + 1)), (kw, n + 1)
        if k and B:  # a speculative step asked for the proposer's passes
            d = m._draft_cache.get(B)
            assert d is not None and _hex(d) == _hex(ref._draft_pass_coeffs(B)), (kw, B)
    assert asked == 300
    # the whole iteration time on cold memos too (prompt chunks beside decodes: token, LM-head and
    # proposer misses inside ``time``)
    m2 = ExecutionModel.from_preset(**kw)
    fast2 = iteration_costs(m2)
    assert fast2 is not None
    rng = random.Random(1)
    for _ in range(200):
        pf = [(rng.randint(1, 2048), rng.randint(0, 9000)) for _ in range(rng.choice([0, 1, 2]))]
        B = rng.choice([0, 1, 5, 33, 200]) if pf else rng.choice([1, 5, 33, 200])
        kk = rng.randint(0, 6) if (spec and B) else 0
        S = rng.randint(B, 300_000) if B else 0
        assert _hex(fast2.time(pf, B, S, kk)) == _hex(ref.iteration_time_s(pf, B, S, kk)), (kw, pf, B, S, kk)


def test_dense_models_compute_their_misses_here_and_moe_models_ask_the_model():
    dense = iteration_costs(ExecutionModel.from_preset("llama-2-7b", "a100-80gb"))
    moe = iteration_costs(ExecutionModel.from_preset("qwen3-30b-a3b", "h100-80gb", tensor_parallel=2,
                                                     expert_parallel=2))
    assert dense is not None and dense.tok_terms is not None and dense.draft_terms is not None
    assert dense.draft_costs is not None and dense.draft_costs.tok_terms is not None  # the draft model's own
    assert moe is not None and moe.tok_terms is None


def test_invalid_arguments_raise_the_models_errors():
    m = ExecutionModel.from_preset("llama-2-7b", "a100-80gb", draft_model=None)
    fast = iteration_costs(m)
    assert fast is not None
    for B, k in [(-1, 0), (4, -1), (4, 2)]:  # negative batch, negative depth, depth without a proposer
        with pytest.raises(ValueError) as want:
            m.decode_coeffs(B, k)
        with pytest.raises(ValueError) as got:
            fast.coeffs(B, k)
        assert str(got.value) == str(want.value)


def test_a_replica_asks_its_evaluator_for_decode_coefficients():
    from inferencegym.sim.cluster import Cluster
    from inferencegym.sim.config import ClusterConfig
    from inferencegym.sim.fleet_ops import SlowModel

    cl = Cluster(ClusterConfig())
    rep = cl.replicas[0]
    m = rep.model
    ref = ExecutionModel(**m._args())  # the same inputs, fresh memos
    for B, k in [(1, 0), (37, 0), (37, 3), (250, 8), (513, 1)]:
        got = rep._decode_coeffs(B, k)
        assert got is m.decode_coeffs(B, k)  # the model's memo entry
        assert _hex(got) == _hex(ref.decode_coeffs(B, k))
    rep.model = SlowModel(m, 2.0)  # a wrapper: its own decode_coeffs (no evaluator)
    a, b = m.decode_coeffs(5, 0)
    assert rep._decode_coeffs(5, 0) == (a * 2.0, b * 2.0)
