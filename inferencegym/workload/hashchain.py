"""Prefix-block hash chains: from a trace's hash ids to the simulator's KV-block hashes.

Prefix-sharing traces (Mooncake FAST'25, Qwen-Bailian) give every request a list of *hash ids*, one
per block of ``B`` prompt tokens (Mooncake ``B = 512``, Bailian ``B = 16``): block ``j`` covers
tokens ``[j*B, (j+1)*B)`` and equal leading ids mean a shareable prefix. The simulator caches KV in
blocks of ``S`` tokens (default 16) and identifies a block by a *chained* hash: the hash of block
``k`` identifies tokens ``0 .. (k+1)*S - 1`` of the prompt, as vLLM's block hashes do.

The mapping (deterministic, no salted Python ``hash``):

1. trace-level prefix hash ``c_j = mix(sum_{t<=j} mix(mix(id_t) + t*golden) + (j+1)*K)`` (mod 2^64,
   ``mix`` = splitmix64's finaliser, a bijection): ``c_j`` is a function of the ids of trace blocks
   ``0..j`` and their positions, so equal prefixes give equal ``c_j``; two prefixes that differ in
   one block never collide (the sums differ by ``mix(a) - mix(b) != 0``), others with probability
   ~2^-64 per pair. Unlike a per-block blake2b chain it is one numpy ``cumsum`` per request
   (about 100x faster in Python, which matters for generated workloads of 16-token blocks);
2. simulator block ``k`` (only *full* ones: ``(k+1)*S <= prompt_tokens``) ends at token
   ``e = (k+1)*S``; it lies in trace block ``j = (e-1) // B`` at offset ``e - j*B`` (1..B); its
   hash is ``splitmix64(c_j + offset * golden)``. For fixed ``c_j`` that map is a bijection of the
   offset, so the sub-blocks of one trace block never collide with each other.

The hash of simulator block ``k`` therefore depends on exactly the ids of the trace blocks that
hold its tokens and the ones before (any ``S`` and ``B``, divisible or not). A chain that covers
fewer tokens than the prompt (fewer ids than ``ceil(prompt / B)``) hashes only the simulator blocks
it covers: the rest of the prompt is unique to the request. A chain with more ids than the prompt
has blocks is an error, as is a negative or non-integer id.
"""

from __future__ import annotations

import gc
from typing import Sequence

import numpy as np

__all__ = ["HashChainError", "check_chain", "trace_chain", "sim_block_hashes", "sim_block_hashes_many", "GOLDEN"]

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_K = np.uint64(0xD6E8FEB86659FD93)


class HashChainError(ValueError):
    """A hash chain that does not fit its prompt (message names file/row/field and what was expected)."""


def _splitmix64(x: np.ndarray) -> np.ndarray:
    z = x + GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def check_chain(hash_ids: np.ndarray, prompt_tokens: int, trace_block_tokens: int, where: str = "") -> None:
    """Raise `HashChainError` unless ``hash_ids`` are integers >= 0 and fit ``prompt_tokens``.

    ``where`` prefixes the message (e.g. ``"trace.jsonl: row 7, field 'hash_ids'"``).
    """
    at = f"{where}: " if where else ""
    ids = np.asarray(hash_ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise HashChainError(f"{at}expected a list of integer block ids, got {hash_ids!r:.80}")
    if ids.size and ids.min() < 0:
        k = int(np.argmin(ids))
        raise HashChainError(f"{at}expected block ids >= 0, got {int(ids[k])} at position {k}")
    most = -(-int(prompt_tokens) // int(trace_block_tokens))
    if ids.size > most:
        raise HashChainError(
            f"{at}{ids.size} blocks of {trace_block_tokens} tokens cover {ids.size * trace_block_tokens} "
            f"tokens, but the prompt has {prompt_tokens} tokens (expected at most ceil({prompt_tokens}/"
            f"{trace_block_tokens}) = {most} ids; check the trace's block size)")


def trace_chain(hash_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """``c_j`` for every trace block (uint64), a hash of the ids of blocks ``0..j`` (vectorised).

    ``x_t = mix(mix(id_t) + t * golden)`` keys each id by its position, ``S_j = x_0 + ... + x_j``
    (mod 2^64, one ``cumsum``) and ``c_j = mix(S_j + (j+1) * K)`` adds the length; ``mix`` is
    splitmix64's finaliser, a bijection of 64-bit words.
    """
    ids = np.asarray(hash_ids, dtype=np.int64).reshape(-1).view(np.uint64)
    t = np.arange(ids.size, dtype=np.uint64)
    x = _splitmix64(_splitmix64(ids) + t * GOLDEN)
    return _splitmix64(np.cumsum(x, dtype=np.uint64) + (t + np.uint64(1)) * _K)


def sim_block_hashes(hash_ids: Sequence[int] | np.ndarray, prompt_tokens: int, *,
                     trace_block_tokens: int, sim_block_tokens: int = 16) -> tuple[int, ...]:
    """The simulator's chained block hashes of one prompt (signed 64-bit Python ints).

    One hash per full simulator block that the chain covers: ``min(prompt // S, len(ids)*B // S)``
    hashes. Call `check_chain` first for a clear error on bad input.
    """
    if sim_block_tokens < 1 or trace_block_tokens < 1:
        raise ValueError(f"block sizes must be >= 1, got trace {trace_block_tokens}, sim {sim_block_tokens}")
    m = len(hash_ids)
    n = min(int(prompt_tokens), m * trace_block_tokens) // sim_block_tokens
    if n <= 0:
        return ()
    m_used = min(m, -(-n * sim_block_tokens // trace_block_tokens))
    c = trace_chain(np.asarray(hash_ids[:m_used], dtype=np.int64))
    end = (np.arange(1, n + 1, dtype=np.int64)) * sim_block_tokens
    j = (end - 1) // trace_block_tokens
    offset = (end - j * trace_block_tokens).astype(np.uint64)
    return tuple(_splitmix64(c[j] + offset * GOLDEN).view(np.int64).tolist())


def sim_block_hashes_many(chains: Sequence[np.ndarray], prompt_tokens: Sequence[int] | np.ndarray, *,
                          trace_block_tokens: int, sim_block_tokens: int = 16) -> list[tuple[int, ...]]:
    """`sim_block_hashes` of many prompts at once (the same values, bit for bit): one pass of
    numpy over every trace block and every simulator block of the batch instead of a few numpy
    calls per prompt (a Mooncake trace has ~4,000 prompts of ~1,000 simulator blocks)."""
    if sim_block_tokens < 1 or trace_block_tokens < 1:
        raise ValueError(f"block sizes must be >= 1, got trace {trace_block_tokens}, sim {sim_block_tokens}")
    B, S = int(trace_block_tokens), int(sim_block_tokens)
    n_req = len(chains)
    if n_req == 0:
        return []
    m = np.fromiter(map(len, chains), dtype=np.int64, count=n_req)
    p = np.asarray(prompt_tokens, dtype=np.int64).reshape(-1)
    if p.shape[0] != n_req:
        raise ValueError(f"{n_req} chains but {p.shape[0]} prompt lengths")
    n = np.minimum(p, m * B) // S  # simulator blocks hashed per prompt
    n = np.maximum(n, 0)
    off = np.zeros(n_req + 1, np.int64)
    np.cumsum(m, out=off[1:])
    total = int(off[-1])
    if total == 0 or not n.any():
        return [()] * n_req
    flat = np.concatenate([np.asarray(c, dtype=np.int64).reshape(-1) for c in chains]).view(np.uint64)
    # c_j of every trace block: position-keyed ids, a running sum restarted at every prompt
    t = np.arange(total, dtype=np.int64) - np.repeat(off[:-1], m)
    tu = t.astype(np.uint64)
    x = _splitmix64(_splitmix64(flat) + tu * GOLDEN)
    cs = np.cumsum(x, dtype=np.uint64)
    base = np.zeros(n_req, np.uint64)
    has = off[:-1] > 0
    base[has] = cs[off[:-1][has] - 1]
    c = _splitmix64(cs - np.repeat(base, m) + (tu + np.uint64(1)) * _K)
    starts = off[:-1]
    if B % S == 0:  # R simulator blocks per trace block: a (trace blocks x R) table, no division
        R = B // S
        subs = (np.arange(1, R + 1, dtype=np.uint64) * np.uint64(S)) * GOLDEN
        h = _splitmix64(c[:, None] + subs[None, :]).reshape(-1).view(np.int64)
        a = (starts * R).tolist()
    else:  # every simulator block: its trace block j and the offset inside it
        boff = np.zeros(n_req + 1, np.int64)
        np.cumsum(n, out=boff[1:])
        k = np.arange(int(boff[-1]), dtype=np.int64) - np.repeat(boff[:-1], n)
        end = (k + 1) * S
        j = (end - 1) // B
        offset = (end - j * B).astype(np.uint64)
        h = _splitmix64(c[np.repeat(starts, n) + j] + offset * GOLDEN).view(np.int64)
        a = boff[:-1].tolist()
    nn = n.tolist()
    # millions of Python ints and a few thousand tuples, no reference cycle: the cyclic collector
    # would walk the growing list at every young collection (~25 % of this step), so pause it
    paused = gc.isenabled()
    gc.disable()
    try:
        hl = h.tolist()
        return [tuple(hl[a[i]:a[i] + nn[i]]) for i in range(n_req)]
    finally:
        if paused:
            gc.enable()
