"""Replay of hash chains as block-aligned prompts, and the engine's prefix-cache hit rate, against a
fake OpenAI-compatible engine with an infinite prefix cache (127.0.0.1)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fakes.openai_server import FakeOpenAIServer
from inferencegym.apps.replay import ReplayConfig, compare, run_replay
from inferencegym.workload import Workload
from inferencegym.workload.prefix_stats import prefix_stats
from inferencegym.workload.prompt_text import chain_prompt, workload_prompts


def _workload() -> Workload:
    # three "documents" of 4..6 blocks (16 tokens per id), each asked several times, plus unique prompts
    rng = np.random.default_rng(0)
    chains, prompts = [], []
    docs = {0: [1, 2, 3, 4], 1: [10, 11, 12, 13, 14, 15], 2: [20, 21, 22, 23, 24]}
    nxt = 1000
    for i in range(14):
        if i % 3 == 2:
            n = int(rng.integers(20, 90))
            chains.append(list(range(nxt, nxt + -(-n // 16))))
        else:
            d = docs[int(rng.integers(0, 3))]
            n = 16 * len(d) + int(rng.integers(1, 40))
            chains.append(d + list(range(nxt, nxt + -(-n // 16) - len(d))))
        nxt += 100
        prompts.append(n)
    return Workload.from_arrays(np.arange(14) * 0.04, prompts, np.full(14, 3), hash_ids=chains,
                                hash_block_tokens=16)


def test_same_chain_same_text_block_aligned():
    a = chain_prompt([5, 6, 7], 40, trace_block_tokens=16, request_index=0).split()
    b = chain_prompt([5, 6, 8], 48, trace_block_tokens=16, request_index=1).split()
    c = chain_prompt([5, 6, 7], 40, trace_block_tokens=16, request_index=0).split()
    assert len(a) == 40 and len(b) == 48 and a == c
    assert a[:32] == b[:32] and a[32:40] != b[32:40]
    # 512-token trace blocks split into 16-token engine blocks: text follows the simulator hashes
    x = chain_prompt([1, 2], 700, trace_block_tokens=512, request_index=3).split()
    y = chain_prompt([1, 9], 700, trace_block_tokens=512, request_index=4).split()
    assert x[:512] == y[:512] and x[512:688] != y[512:688]
    # without a chain the text is unique per request
    assert chain_prompt(None, 40, trace_block_tokens=16, request_index=0) != \
        chain_prompt(None, 40, trace_block_tokens=16, request_index=1)


def test_engine_sees_the_traces_sharing_and_reports_it():
    w = _workload()
    bound = prefix_stats(w, block_tokens=16)["hit_bound"]
    assert 0.2 < bound < 0.9
    prompts = workload_prompts(w, len(w), max_prompt_tokens=8192)
    with FakeOpenAIServer(ttft_s=0.01, itl_s=0.001, prefix_cache=True) as srv:
        cfg = ReplayConfig(endpoint=srv.base_url, model="fake-model", concurrency=1, warmup=False)
        res = run_replay(w.arrival_s, w.prompt_tokens, w.output_tokens, cfg, prompts=prompts)
    assert not res.records["rejected"].any()
    assert res.engine_prefix is not None and res.engine_prefix["queries"] == w.prompt_tokens.sum()
    assert res.engine_prefix["hit_rate"] == pytest.approx(bound)   # the fake is an infinite cache
    rep = compare(res.records, None, res.itl_s, engine_prefix=res.engine_prefix, hit_bound=bound)
    pc = rep["prefix_cache"]
    assert pc["engine_metrics"] == pytest.approx(bound) and pc["engine_usage"] == pytest.approx(bound)
    assert pc["engine_usage_requests"] == len(w) and pc["trace_hit_bound"] == bound
    # the default word salad defeats the cache
    with FakeOpenAIServer(ttft_s=0.01, itl_s=0.001, prefix_cache=True) as srv:
        cfg = ReplayConfig(endpoint=srv.base_url, model="fake-model", concurrency=1, warmup=False)
        plain = run_replay(w.arrival_s, w.prompt_tokens, w.output_tokens, cfg)
    assert plain.engine_prefix["hit_rate"] == 0.0


def test_servers_without_counters_give_none():
    w = _workload()
    with FakeOpenAIServer(ttft_s=0.01, itl_s=0.001) as srv:
        cfg = ReplayConfig(endpoint=srv.base_url, model="m", warmup=False, concurrency=4)
        res = run_replay(w.arrival_s, w.prompt_tokens, w.output_tokens, cfg)
    assert res.engine_prefix is None
    pc = compare(res.records, None)["prefix_cache"]
    assert pc["engine_metrics"] is None and pc["engine_usage"] is None


def test_cli_replay_of_a_mooncake_trace_adds_the_engine_hit_rate(tmp_path):
    from typer.testing import CliRunner

    from inferencegym.cli import app

    rows = [{"timestamp": i * 40, "input_length": 1100 + i, "output_length": 2, "hash_ids": [0, 1, 50 + i]}
            for i in range(6)]
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with FakeOpenAIServer(ttft_s=0.01, itl_s=0.001, prefix_cache=True) as srv:
        r = CliRunner().invoke(app, ["replay", "--endpoint", srv.base_url, "--model", "fake-model", "--trace",
                                     str(p), "--no-warmup", "--concurrency", "1", "--no-sim", "--json"])
    assert r.exit_code == 0, r.output
    pc = json.loads(r.stdout[r.stdout.index("{"):])["prefix_cache"]
    # requests 2..6 reuse the 1024 tokens of the first two 512-token blocks
    expected = 5 * 1024 / sum(1100 + i for i in range(6))
    assert pc["trace_hit_bound"] == pytest.approx(expected)
    assert pc["engine_metrics"] == pytest.approx(expected)
