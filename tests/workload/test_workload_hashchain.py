"""Trace hash ids -> simulator block hashes: determinism, prefix identity, full blocks only, errors."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from inferencegym.workload import Workload
from inferencegym.workload.hashchain import HashChainError, check_chain, sim_block_hashes, sim_block_hashes_many


def test_same_prefix_same_hashes_and_divergence_changes_every_later_block():
    a = sim_block_hashes([7, 8, 9], 1536, trace_block_tokens=512, sim_block_tokens=16)
    b = sim_block_hashes([7, 8, 10], 1536, trace_block_tokens=512, sim_block_tokens=16)
    c = sim_block_hashes([6, 8, 9], 1536, trace_block_tokens=512, sim_block_tokens=16)
    assert len(a) == len(b) == 96
    assert a[:64] == b[:64]                                   # first two trace blocks agree
    assert all(x != y for x, y in zip(a[64:], b[64:]))       # third differs: every sub-block differs
    assert all(x != y for x, y in zip(a, c))                  # a different root changes the whole chain
    assert len(set(a)) == len(a)                              # sub-blocks of one trace block are distinct


def test_only_full_simulator_blocks_get_hashes():
    assert len(sim_block_hashes([1], 40, trace_block_tokens=512)) == 2       # 40 // 16
    assert len(sim_block_hashes([1], 15, trace_block_tokens=512)) == 0
    assert len(sim_block_hashes([1, 2], 1000, trace_block_tokens=512)) == 62
    # a chain shorter than the prompt hashes only the tokens it covers
    assert len(sim_block_hashes([1], 1000, trace_block_tokens=512)) == 32
    # the partial last trace block: a longer prompt with the same ids shares the covered full blocks
    short = sim_block_hashes([1, 2], 600, trace_block_tokens=512)
    long = sim_block_hashes([1, 2], 1000, trace_block_tokens=512)
    assert long[:len(short)] == short


def test_sim_block_spanning_several_trace_blocks_depends_on_all_of_them():
    # Bailian-like 16-token trace blocks, a 32-token simulator block: block 0 = trace blocks 0 and 1
    a = sim_block_hashes([1, 2, 3, 4], 64, trace_block_tokens=16, sim_block_tokens=32)
    b = sim_block_hashes([1, 5, 3, 4], 64, trace_block_tokens=16, sim_block_tokens=32)
    assert len(a) == 2 and a[0] != b[0] and a[1] != b[1]
    # non-divisible sizes: 24-token trace blocks, 16-token sim blocks; block 1 (tokens 16..31)
    # ends inside trace block 1, so it changes with id 1 but block 0 does not
    x = sim_block_hashes([1, 2], 48, trace_block_tokens=24, sim_block_tokens=16)
    y = sim_block_hashes([1, 9], 48, trace_block_tokens=24, sim_block_tokens=16)
    assert x[0] == y[0] and x[1] != y[1] and x[2] != y[2]


def test_hashes_are_stable_across_processes_not_salted():
    code = ("from inferencegym.workload.hashchain import sim_block_hashes;"
            "print(sim_block_hashes([3, 1, 4], 1500, trace_block_tokens=512)[-1])")
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout.strip())
    assert outs == {str(sim_block_hashes([3, 1, 4], 1500, trace_block_tokens=512)[-1])}


def test_no_collisions_between_distinct_prefixes():
    rng = np.random.default_rng(0)
    seen: dict[int, tuple] = {}
    for _ in range(3000):
        ids = tuple(rng.integers(0, 50, size=rng.integers(1, 6)).tolist())
        for k, h in enumerate(sim_block_hashes(list(ids), len(ids) * 64, trace_block_tokens=64)):
            key = (ids[: k // 4 + 1], k % 4)  # the prefix this block identifies
            assert seen.setdefault(h, key) == key


@pytest.mark.parametrize("ids,prompt,match", [
    ([1, 2, 3], 1024, "3 blocks of 512 tokens .* at most ceil\\(1024/512\\) = 2"),
    ([1, -2], 1024, "block ids >= 0, got -2 at position 1"),
    ([1.5, 2.0], 1024, "integer block ids"),
])
def test_bad_chains_raise_with_what_was_expected(ids, prompt, match):
    with pytest.raises(HashChainError, match=match):
        check_chain(np.asarray(ids), prompt, 512, "t.jsonl: row 3, field 'hash_ids'")
    with pytest.raises(ValueError, match="request 0, hash_ids"):
        Workload.from_arrays([0.0], [prompt], [1], hash_ids=[ids], hash_block_tokens=512)


def test_workload_carries_chains_through_sort_window_merge_and_to_requests():
    w = Workload.from_arrays([1.0, 0.0, 2.0], [1024, 512, 700], [1, 2, 3],
                             hash_ids=[[1, 2], [1], [1, 3]], hash_block_tokens=512)
    assert [h.tolist() for h in w.hash_ids] == [[1], [1, 2], [1, 3]]
    reqs = w.to_requests()
    assert [len(r.block_hashes) for r in reqs] == [32, 64, 43]
    assert reqs[1].block_hashes[:32] == reqs[0].block_hashes == reqs[2].block_hashes[:32]
    assert reqs[1].block_hashes[32:] != reqs[2].block_hashes[32:43]
    assert [len(r.block_hashes) for r in w.to_requests(block_size=256)] == [2, 4, 2]
    win = w.window(0.5, 2.0)
    assert [h.tolist() for h in win.hash_ids] == [[1, 2], [1, 3]] and win.hash_block_tokens == 512
    m = Workload.merge([w, w.shift(0.25)])
    assert len(m) == 6 and m.hash_block_tokens == 512
    assert [h.tolist() for h in m.hash_ids][:2] == [[1], [1]]
    # a workload without chains gives empty block_hashes (no sharing: the simulator's old behaviour)
    plain = Workload.from_arrays([0.0], [512], [1])
    assert plain.to_requests()[0].block_hashes == ()
    with pytest.raises(ValueError, match="different block sizes"):
        Workload.merge([w, Workload.from_arrays([0.0], [16], [1], hash_ids=[[1]], hash_block_tokens=16)])


@pytest.mark.parametrize("trace_block,sim_block", [(512, 16), (16, 16), (64, 24), (7, 16)])
def test_batched_hashes_equal_the_per_prompt_ones(trace_block, sim_block):
    rng = np.random.default_rng(trace_block + sim_block)
    chains, prompts = [], []
    for _ in range(300):
        m = int(rng.integers(0, 9))
        ids = rng.integers(0, 2**62, size=m) if rng.random() < 0.5 else rng.integers(0, 5, size=m)
        prompt = int(rng.integers(max(1, (m - 1) * trace_block + 1), m * trace_block + 2 * trace_block + 2))
        chains.append(ids.astype(np.int64))
        prompts.append(prompt if rng.random() < 0.95 else 0)
    got = sim_block_hashes_many(chains, prompts, trace_block_tokens=trace_block, sim_block_tokens=sim_block)
    want = [sim_block_hashes(c, p, trace_block_tokens=trace_block, sim_block_tokens=sim_block)
            for c, p in zip(chains, prompts)]
    assert got == want and sum(map(len, got)) > 100
    assert all(type(h) is tuple and all(type(x) is int for x in h) for h in got)
