"""Prompt text from hash chains, for replaying prefix-sharing workloads against a real engine.

Every simulator block of ``block_tokens`` tokens becomes ``block_tokens`` common English words, each
one token with its leading space in Llama / GPT tokenizers. The words of block ``k`` are a function
of that block's chained hash alone (`hashchain.sim_block_hashes`), so two prompts with the same
prefix of blocks get the same text for it, block-aligned, and an engine with prefix caching (vLLM's
automatic prefix caching, SGLang's radix cache) sees the same sharing as the trace. The rest of a
prompt (its partial last block, or what its chain does not cover) is unique to the request: words
from a Generator seeded by ``(seed, request index)``. Without hash chains every prompt is unique.
"""

from __future__ import annotations

import numpy as np

from .hashchain import GOLDEN, _splitmix64, sim_block_hashes
from .trace import Workload

__all__ = ["WORDS", "block_words", "chain_prompt", "workload_prompts"]

# Common English words that are one token in Llama / GPT tokenizers (with their leading space).
WORDS = np.array(("the of and to in is that for it as was with be by on not he this are or his from at "
                  "which but have an they you were her she there been one all we their has would when if "
                  "so no more can will what about up out them some time then its only into other could "
                  "these two may first new also any after how where most over such our well way even "
                  "make many did because down back just good each those people see much must life day "
                  "same work use long great little world own still old year man state last place").split())


def block_words(block_hashes: np.ndarray, block_tokens: int) -> np.ndarray:
    """Word indices, shape ``(blocks, block_tokens)``, a function of each block's hash only."""
    h = np.asarray(block_hashes, dtype=np.int64).view(np.uint64)[:, None]
    j = np.arange(block_tokens, dtype=np.uint64)[None, :]
    return (_splitmix64(h + (j + np.uint64(1)) * GOLDEN) % np.uint64(WORDS.size)).astype(np.int64)


def chain_prompt(hash_ids, prompt_tokens: int, *, trace_block_tokens: int, block_tokens: int = 16,
                 request_index: int = 0, seed: int = 0) -> str:
    """About ``prompt_tokens`` tokens of text whose full blocks follow the hash chain."""
    n = max(int(prompt_tokens), 1)
    hashes = np.asarray(sim_block_hashes(hash_ids, n, trace_block_tokens=trace_block_tokens,
                                         sim_block_tokens=block_tokens), np.int64) \
        if hash_ids is not None and len(hash_ids) else np.zeros(0, np.int64)
    shared = block_words(hashes, block_tokens).reshape(-1) if hashes.size else np.zeros(0, np.int64)
    rng = np.random.default_rng([seed, request_index])
    tail = rng.integers(0, WORDS.size, size=n - shared.size)
    return "".join(" " + w for w in WORDS[np.concatenate((shared, tail))].tolist())


def workload_prompts(w: Workload, count: int, *, max_prompt_tokens: int, block_tokens: int = 16,
                     seed: int = 0) -> list[str]:
    """Prompts of the first ``count`` requests (arrival order), clipped to ``max_prompt_tokens``
    (a clip keeps the first tokens, so shared prefixes stay shared)."""
    out = []
    for i in range(min(count, len(w))):
        p = min(max(int(w.prompt_tokens[i]), 1), max_prompt_tokens)
        ids = None if w.hash_ids is None else w.hash_ids[i]
        out.append(chain_prompt(ids, p, trace_block_tokens=max(w.hash_block_tokens, 1),
                                block_tokens=block_tokens, request_index=i, seed=seed))
    return out
