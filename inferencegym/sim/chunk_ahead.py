"""Chunked-prefill iterations without speculation, several in one event (a speed path; results
bit-identical).

Under chunked prefill (``sarathi``) with speculation off, an iteration that carries a prompt chunk
is planned one at a time (``ITER``: its length depends on the chunk), so a long prompt beside a
decoding batch costs one event, one scheduler pass and several walks over the batch per chunk.
When nothing else can happen before an iteration ends (the run's limit and the next arrival or
transfer, as for ``spec_ahead``), :func:`advance_chunks` applies it and plans the next one at once
in one walk over the decoding sequences, as long as:

* no decoding sequence finishes and no chunk completes its prompt in it (such an iteration, when
  it ends strictly before every queued event, is applied by the step event's own code,
  ``on_step_end``, its completions reach the cluster's ledger, and the ordinary ``plan`` follows;
  a prompt handed off to a decode replica is left to the event);
* the next iteration's KV blocks fit without preemption, chunks are left to plan, and nothing
  queued could be admitted with the budget left (otherwise the ordinary ``plan`` decides there).

Every effect of ``ReplicaAdvance._apply_iter`` (speculation off: each decoding sequence's gap,
the one weighted sample of those that also produced the previous token) and of
``SarathiScheduler.plan`` / ``Replica.plan`` is reproduced in the same order: the same TBT
records, KV allocations and occupancy integral, the same chunks (``spec_chunks.next_chunks``) and
iteration times. ``tests/sim/test_sim_chunk_ahead.py`` checks the results against one event per
iteration (``Cluster(max_run_iterations=1)``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .replica_advance import ITER
from .spec_ahead import irregular_step, nothing_admits
from .spec_chunks import apply_chunks, completes_prompt, hands_off, next_chunks, prefilling

if TYPE_CHECKING:
    from .events import EventQueue
    from .replica import Replica
    from .window_metrics import RunLedger

_INF = math.inf


def advance_chunks(rep: "Replica", lim: float, ledger: "RunLedger | None" = None,
                   events: "EventQueue | None" = None) -> float | None:
    """``rep`` has just planned a chunked-prefill iteration without speculation; apply it and the
    following ones while each ends by ``lim`` and the batch stays stable (see the module
    docstring; ``ledger`` / ``events`` as for ``spec_ahead.advance_spec``). Returns the end time
    of the work left planned (None when the replica went idle)."""
    while True:
        e, again = _stretch(rep, lim, ledger, events)
        if not again:
            return e


def _stretch(rep: "Replica", lim: float, ledger: "RunLedger | None",
             events: "EventQueue | None") -> tuple[float | None, bool]:
    """One stretch with the batch set up once: ``(end time, whether the ordinary plan ran here and
    a new stretch may follow)``."""
    e = rep.seg_end
    if not e <= lim:
        return e, False
    if (rep.state != ITER or rep.spec_k or rep.pending is not None or rep.max_run <= 1
            or rep.reload_debt_s or rep.api_pending or rep.block_end > rep.iterations):
        return e, False
    cfg = rep.cfg
    chunks = rep.it_chunks
    if cfg.scheduler != "sarathi" or not chunks:
        return e, False
    if completes_prompt(chunks):  # (the step event's code, without a set-up here)
        if ledger is None or hands_off(chunks):
            return e, False
        return irregular_step(rep, e, ledger, events)
    decodes = rep.seg_decodes
    B = len(decodes)
    pfl = prefilling(rep, B, chunks)
    if pfl is None:
        return e, False
    queued = bool(rep.waiting or rep.prio_waiting)
    csize = cfg.chunk_size
    budget0 = csize * cfg.pipeline_parallel - B  # the token budget after the decodes
    kv = rep.kv
    pc = kv.prefix_caching
    bs = kv.block_size
    bs1 = bs - 1
    lk = rep.lookahead
    win = rep.win
    add = win.add_tbt
    multi = win.ttbt is not None
    nt = rep.n_tenants
    quality = rep.quality
    recent_append = rep.recent_iter.append
    async_sched = rep.async_sched
    t0 = rep.seg_t0
    S = B
    minrem = 1 << 62  # the fewest tokens a decoding sequence has left (one a iteration)
    for r in decodes:
        S += r.kv_tokens
        x = r.output_tokens - r.generated_tokens
        if x < minrem:
            minrem = x
    t_back: list[int] = []
    while e <= lim:
        irregular = minrem <= 1  # a sequence's last token
        for r, c in chunks:
            if not r.kv_blocks:
                return e, False  # lost its blocks to a priority admission: the event applies it
            if r.prefilled_tokens + c >= r.prefill_target:
                irregular = True  # the prompt's first token
        if irregular:  # the step event's own code
            if ledger is None or hands_off(chunks):
                return e, False
            return irregular_step(rep, e, ledger, events)
        # ReplicaAdvance._apply_iter (speculation off) at e, the KV growth of reserve_decode
        rep.now = e
        rep.iterations += 1
        dur = e - t0
        recent_append(dur)
        if async_sched:
            rep.cutoff = t0
        short = 0
        grow = None
        if B:
            back = 0
            if multi:
                t_back = [0] * nt
            for r in decodes:
                lt = r.last_token_s
                gap = e - lt
                if lt == t0:
                    back += 1
                    if multi:
                        t_back[r.tenant] += 1
                else:
                    add(gap, 0.0, 1, 1.0, r.tenant)
                if gap > r.tbt_max_s:
                    r.tbt_max_s = gap
                r.tbt_sum_s += gap
                r.last_token_s = e
                g = r.generated_tokens = r.generated_tokens + 1
                kt = r.kv_tokens = r.kv_tokens + 1
                rem = r.output_tokens - g
                nb = (kt + (lk if lk < rem else rem) + bs1) // bs
                if nb > r.kv_blocks:
                    short += nb - r.kv_blocks
                    if grow is None:
                        grow = [(r, nb)]
                    else:
                        grow.append((r, nb))
            add(dur, 0.0, 1, back, 0, t_back if multi else None)
            win.tokens_out += B
            if quality:
                win.quality_token_sum += quality * B
        apply_chunks(rep, chunks, pc)  # (none completes its prompt: checked above)
        # SarathiScheduler.plan: the chunks of the prompts still prefilling, then admission
        chunks, pf, left = next_chunks(pfl, budget0, csize)
        free = kv.capacity_blocks - kv.used_blocks
        if short > free or not chunks or (queued and left > 0 and not nothing_admits(rep, free - short)):
            rep.state = 0  # preemption, a decode run or an admission: the ordinary plan decides
            rep.it_chunks = []
            return rep.plan(e), True
        if short:
            rep._kv_advance(e)
            for r, nb in grow:  # type: ignore[union-attr]  # short > 0: grow is a list
                r.kv_blocks = nb
            kv.allocate(short)
            rep._kv_peak()
        minrem -= 1
        S += B
        rep.preempted_in_plan = False
        rep.blocked = False
        rep.cutoff = _INF
        rep.seg_t0 = t0 = e
        rep.it_chunks = chunks
        e = rep.seg_end = e + rep._iter_time(pf, B, S, 0)
    return e, False
