"""Sliding-window attention layers (gpt-oss: 18 of 36 layers see the last 128 tokens): the keys a
chunk attends to, the KV held per token and the attention cost of long contexts."""

import itertools
from dataclasses import replace

import pytest

from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.presets import get_model
from inferencegym.sim.sliding_window import window_keys


def test_window_keys_count_every_query_s_visible_keys():
    for n, c, w in itertools.product(range(0, 30), range(0, 30), range(1, 12)):
        own = sum(min(w, i + 1) for i in range(n))
        total = sum(min(w, c + i + 1) for i in range(n))
        assert window_keys(n, c, w) == pytest.approx((own, total - own))
    # a window wider than the sequence is full attention
    assert window_keys(100, 50, 10_000) == pytest.approx((100 * 101 / 2, 100 * 50))


def _oss(**kw) -> ExecutionModel:
    return ExecutionModel.from_preset(model="gpt-oss-120b", gpu="h100-80gb", quantization="mxfp4",
                                      engine_profile="kernel-only", **kw)


def _full(m: ExecutionModel) -> ExecutionModel:
    """The same model with every layer attending to the whole context."""
    return m._replace(model=replace(m.model, sliding_window=0, sliding_window_layers=0))


def test_gpt_oss_config_alternates_sliding_and_full_layers():
    m = get_model("gpt-oss-120b")
    assert (m.sliding_window, m.sliding_window_layers, m.num_layers) == (128, 18, 36)
    assert get_model("llama-3-8b").sliding_window_layers == 0


def test_kv_per_token_counts_the_full_attention_layers_only():
    g = _oss()
    assert g.kv_bytes_per_token == 18 * 2 * 8 * 64 * 2  # 18 layers x K,V x 8 heads x 64 x BF16
    assert _full(g).kv_bytes_per_token == 2 * g.kv_bytes_per_token
    assert g.kv_capacity_tokens() == pytest.approx(2 * _full(g).kv_capacity_tokens(), abs=2)


def test_long_context_attention_costs_about_half_short_context_the_same():
    g = _oss()
    f = _full(g)
    # decode: the context slope halves, the sliding layers read 128 tokens per sequence
    a, b = g.decode_coeffs(64)
    af, bf = f.decode_coeffs(64)
    assert b == pytest.approx(bf / 2)
    assert a > af
    long_g = g.decode_step_time_s(64, 32_000) - g.decode_step_time_s(64, 0)
    long_f = f.decode_step_time_s(64, 32_000) - f.decode_step_time_s(64, 0)
    assert 0.45 < long_g / long_f < 0.55
    # prefill: a 32k-token prompt's attention is ~halved; a 100-token prompt is unchanged
    assert g.attention_prefill_layer_s([(8192, 24_000)]) == f.attention_prefill_layer_s([(8192, 24_000)])
    pf = [(8192, 24_000)]
    att_g = g.iteration_time_s(pf) - g._token_time(8192) - g._lm_head_time(1)
    att_f = f.iteration_time_s(pf) - f._token_time(8192) - f._lm_head_time(1)
    assert 0.48 < att_g / att_f < 0.56
    assert g.prefill_time_s(100) == pytest.approx(f.prefill_time_s(100), rel=1e-3)
    # mixed steps: the decoding sequences' context costs half as much, as in pure decode
    def ctx_cost(m):
        return m.iteration_time_s([(512, 0)], 32, 32 * 4000) - m.iteration_time_s([(512, 0)], 32, 0)

    assert ctx_cost(g) == pytest.approx(ctx_cost(f) / 2)
    assert g.iteration_time_s([(512, 0)], 32, 0) > f.iteration_time_s([(512, 0)], 32, 0)


def test_dense_models_take_the_unchanged_path():
    m = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb")
    assert m._sw_layers == 0 and m._full_layers == 32
    assert m.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2


def test_a_running_sequence_holds_its_window_s_blocks_of_the_shared_pool():
    """vLLM's hybrid KV-cache manager draws the sliding layers' blocks from the full-attention layers'
    pool: a gpt-oss sequence holds its context's blocks plus up to 9 (a 128-token window spans at
    most 9 blocks of 16), so fewer ShareGPT-sized sequences fit; all of them come back at release."""
    import numpy as np

    from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
    from inferencegym.sim.sliding_window import window_blocks

    g = _oss()
    assert window_blocks(g, 16) == 9 and window_blocks(_full(g), 16) == 0
    assert window_blocks(ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb"), 16) == 0

    def peak_running(model: str, quant: str) -> tuple[int, Cluster]:
        rc = ReplicaConfig(model=model, gpu="h100-80gb", quantization=quant, scheduler="sarathi",
                           chunk_size=8192, batch_cap=1024, kv_budget_fraction=0.05, prefix_caching=False)
        c = Cluster(ClusterConfig(replica=rc, num_replicas=1, router="round_robin"), rng=np.random.default_rng(0))
        c.submit([Request(req_id=i, arrival_s=0.0, prompt_tokens=300, output_tokens=100) for i in range(400)])
        rep = c.replicas[0]
        peak, t = 0, 0.0
        while c.n_completed + c.n_rejected < 400:
            t += 0.05
            c.run_until(t)
            peak = max(peak, len(rep.running))
            rep.check_invariants()
        return peak, c

    n, c = peak_running("gpt-oss-120b", "mxfp4")
    kv = c.replicas[0].kv
    assert kv.used_blocks == 0 and (~c.results()["rejected"]).all()
    cap = kv.capacity_blocks
    prompt_blocks = -(-300 // 16)  # 19 blocks from admission (25 at full length)
    assert n <= cap // (prompt_blocks + 9) + 1  # each admitted sequence also holds its window's 9
    assert n < cap // prompt_blocks  # without them, cap // 19 (12 here) run at once
