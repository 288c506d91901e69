"""Prompt chunks inside several speculative iterations at once (``spec_ahead``; a speed path,
results bit-identical).

Under chunked prefill (``sarathi``) a long prompt is prefilled over many iterations, each carrying
every decoding sequence plus up to ``chunk_size`` prompt tokens. While no chunk completes its
prompt, the batch is stable: the decoding sequences stay the same, and the next iteration's chunks
follow from the prompts' progress alone (``SarathiScheduler.plan``'s first loop). These helpers
reproduce, for :func:`spec_ahead.advance_spec`, exactly what the event path does with the chunks:
``ReplicaAdvance._apply_iter``'s chunk loop (:func:`apply_chunks`) and the scheduler's chunk plan
(:func:`next_chunks`). A chunk that completes its prompt emits a first token and adds a decoding
sequence: ``advance_spec`` applies that iteration as the step event would, then the ordinary plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .replica import Replica
    from .request import Request


def prefilling(rep: "Replica", n_decodes: int, chunks: "list[tuple[Request, int]]") -> "list[Request] | None":
    """The running requests still prefilling, in running order, when the planned iteration is a
    chunked-prefill one that ``advance_spec`` may carry on (the scheduler's decoding sequences are
    the other running requests); None when there are none (a pure decode batch: the plain path)
    or the planned batch is not of that form."""
    running = rep.running
    if not chunks and n_decodes == len(running):
        return None
    pfl = [r for r in running if r.prefilled_tokens < r.prefill_target]
    if n_decodes + len(pfl) != len(running) or not rep.partials_possible:
        return None
    for r, _c in chunks:
        if r.prefilled_tokens >= r.prefill_target:
            return None  # (a chunk of a request no longer prefilling: not planned by this scheduler)
    return pfl


def completes_prompt(chunks: "list[tuple[Request, int]]") -> bool:
    """Whether a chunk of the planned iteration completes its prompt."""
    for r, c in chunks:
        if r.prefilled_tokens + c >= r.prefill_target:
            return True
    return False


def hands_off(chunks: "list[tuple[Request, int]]") -> bool:
    """Whether a prompt the planned iteration completes goes to a decode replica (a KV transfer
    the cluster starts: its step event decides)."""
    for r, c in chunks:
        if r.handoff and r.prefilled_tokens + c >= r.prefill_target:
            return True
    return False


def apply_chunks(rep: "Replica", chunks: "list[tuple[Request, int]]", prefix_caching: bool) -> None:
    """``ReplicaAdvance._apply_iter``'s chunk loop at ``rep.now`` (every chunk's request holds its
    blocks and none is handed off to a decode replica: the caller checked): the prompt's progress,
    with prefix caching the prompt blocks the chunk completed named in the cache, and for a prompt
    completed its first token (``_emit_token``)."""
    kv = rep.kv
    bs = kv.block_size
    for r, c in chunks:
        r.prefilled_tokens += c
        if prefix_caching and r.block_hashes:
            nf = r.prefilled_tokens // bs
            nh = len(r.block_hashes)
            kv.commit(r, nf if nf < nh else nh)
        if r.prefilled_tokens >= r.prefill_target:
            r.kv_tokens = r.prefill_target
            if r.generated_tokens == 0:
                rep.prompt_tokens_done += r.prompt_tokens
            rep._emit_token(r, rep.now)


def next_chunks(pfl: "list[Request]", budget: int,
                per: int) -> "tuple[list[tuple[Request, int]], list[tuple[int, int]], int]":
    """``SarathiScheduler.plan``'s chunks for the prompts in ``pfl`` (running order) from the token
    budget left after the decodes: ``(chunks, iteration_time_s's (tokens, context) pairs, the
    budget left)``. The scheduler's admission loop runs only while budget is left."""
    chunks: list[tuple[Request, int]] = []
    pf: list[tuple[int, int]] = []
    for r in pfl:
        if budget <= 0:
            break
        pt = r.prefilled_tokens
        rem = r.prefill_target - pt
        if rem > 0:
            c = rem if rem < budget else budget
            if c > per:
                c = per
            chunks.append((r, c))
            pf.append((c, pt))
            budget -= c
    return chunks, pf, budget
