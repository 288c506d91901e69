"""benchmarks/lmcache_multiturn.py: the replayed workload is the one vLLM's multi-turn benchmark sends
(generator semantics of ``bench_dataset.py``, client loop of ``benchmark_serving_multi_turn.py``)."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def lm(bench_module):
    return bench_module("lmcache_multiturn")


def test_num_turns_counts_messages_so_conversations_have_6_to_9_user_turns(lm):
    convs = lm.conversations(np.random.default_rng(5), 4000, 20000, n=200)
    turns = [len(c["turns"]) for c in convs]
    assert min(turns) >= 6 and max(turns) <= 9
    assert set(turns) == {6, 7, 8, 9}


def test_prefix_lognormal_is_rescaled_to_the_exact_average_before_the_cap(lm):
    convs = lm.conversations(np.random.default_rng(7), 4000, 10**9, n=24)
    first = np.array([c["turns"][0][2] for c in convs])  # 500 common + prefix + first question (120-160)
    assert abs(first.mean() - 500 - 140 - 4000) < 15  # the exact average, up to the questions' spread
    capped = lm.conversations(np.random.default_rng(7), 4000, 5000, n=24)
    assert max(c["turns"][0][2] for c in capped) <= 500 + 5000 + 160


def test_prompts_grow_by_answer_question_and_chat_template(lm):
    (conv,) = lm.conversations(np.random.default_rng(11), 4000, 20000, n=1)
    t = conv["turns"]
    assert t[0][0] == t[0][2] + lm.CHAT_MESSAGE_TOKENS + lm.CHAT_GENERATION_TOKENS
    for (p0, o0, c0), (p1, _, c1) in zip(t, t[1:]):
        question = c1 - c0 - o0
        assert 120 <= question <= 160
        assert p1 == p0 + o0 + question + 2 * lm.CHAT_MESSAGE_TOKENS
    assert len(conv["ids"]) * 16 >= t[-1][0] + t[-1][1]


def test_early_stop_ends_the_run_before_every_conversation_is_done(lm):
    eng = lm.qwen3_8b_engine()
    convs = lm.conversations(np.random.default_rng(1000), 1000, 4000, n=12)
    full = sum(len(c["turns"]) for c in convs)
    stopped = lm.run(eng, convs, 0.0, clients=4, early_stop=True)
    everything = lm.run(eng, convs, 0.0, clients=4, early_stop=False)
    assert everything["n"] == full
    assert stopped["n"] < full


def test_round_robin_over_several_active_conversations_defeats_the_gpu_cache(lm):
    """The 20K reading: 2 clients cycling 5 conversations each cannot keep them on the GPU, one
    conversation per client can (the published baseline recomputed nearly every turn)."""
    eng = lm.qwen3_8b_engine()
    convs = lm.conversations(np.random.default_rng(1000), 20000, 20000, n=12)
    cycling = lm.run(eng, convs, 0.0, clients=2, active_per_client=5)
    single = lm.run(eng, convs, 0.0, clients=2, active_per_client=1)
    assert cycling["hit_rate"] < 0.1 < 0.5 < single["hit_rate"]


def test_the_pip_install_sampler_leaves_less_kv_than_flashinfer(lm):
    """PyTorch's sort (38 B a logit) over 256 x 151,936 logits costs ~0.93 GB more than FlashInfer's
    14 B: ~6.3k fewer Qwen3-8B KV tokens (147,456 B each) on the 24 GB card."""
    tn = lm.qwen3_8b_engine(sampler="torch-native").memory
    fi = lm.qwen3_8b_engine(sampler="flashinfer").memory
    assert lm.SAMPLER == "torch-native"
    gap = fi.kv_free_bytes(256) - tn.kv_free_bytes(256)
    assert gap == pytest.approx(256 * 151936 * (38.0 - 14.0), rel=1e-6)
    assert 30_000 < tn.kv_free_bytes(256) / 147456 < 34_000 < fi.kv_free_bytes(256) / 147456 < 40_000


def test_one_token_answers_shrink_later_prompts_by_the_missing_answer_tokens(lm):
    (conv,) = lm.conversations(np.random.default_rng(3), 4000, 20000, n=1)
    (cut,) = lm.fixed_answers([conv], 1)
    assert all(o == 1 for _, o, _ in cut["turns"])
    assert cut["turns"][0][0] == conv["turns"][0][0]
    for k in range(1, len(conv["turns"])):
        missing = sum(o - 1 for _, o, _ in conv["turns"][:k])
        assert cut["turns"][k][0] == conv["turns"][k][0] - missing
