"""Speculative decoding, several iterations in one event (a speed path; results bit-identical).

A speculative iteration's length depends on the tokens the previous one accepted (random), so a
speculating replica plans one iteration at a time (``ITER``) and each iteration is one event. When
nothing else can happen before an iteration ends, the cluster lets :func:`advance_spec` apply it and
plan the next one at once, without the event queue, for as many iterations as that holds:

* the iteration ends by the run's limit and by the next arrival or KV transfer (which come after
  replica steps at an equal time); other replicas' steps do not touch this replica, except under
  disaggregation (a step may start a transfer here), where the limit is the next event of any kind;
* the batch is pure decode, or (chunked prefill, ``sarathi``) decodes plus prompt chunks none of
  which completes its prompt (``spec_chunks.py``: the next chunks follow from the prompts'
  progress), no config change is pending, and nothing queued could be admitted at the
  iteration's end (otherwise the ordinary ``plan`` takes over there);
* no sequence finishes in it and the next iteration's KV blocks fit without preemption
  (otherwise the ordinary ``plan`` takes over, and the fast path goes on after it). An iteration
  in which a sequence finishes or a prompt completes is applied by the step event's own code
  (:func:`irregular_step`: ``on_step_end``, the cluster's ledger, ``plan``) when it ends strictly
  before every queued event, so completions reach the ledger in the order the events would bring
  them; in a drain, or when a completed prompt goes to a decode replica, it is left to the event.

Every effect of :meth:`ReplicaAdvance._apply_iter` / ``_apply_spec`` and of ``Replica.plan`` for this
case is reproduced bit for bit in one tight loop (no event, no scheduler pass, no call per
sequence): the same uniforms in the same order (the replica's block stream, extended without
reordering), the same accepted counts, the same TBT records in the same order, the same sums in
the same order, the same KV allocations and occupancy integral at each iteration boundary, the
same iteration times from ``model.iteration_time_s``. (A numpy version over blocks of iterations
was slower: between two arrivals or completions there are only a few iterations; measured again in
docs/bench/env_speed7.md.) With requests queued, an iteration boundary where the queue head could
be admitted (or a priority request could preempt) hands over to the full ``plan``.
``tests/sim/test_sim_spec_ahead.py`` checks results against the one-event-per-iteration path
(``Cluster(max_run_iterations=1)``), which never takes this path.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .execution import ExecutionModel
from .replica_advance import ITER
from .spec_chunks import apply_chunks, completes_prompt, hands_off, next_chunks, prefilling
from .spec_draws import Draw, table_draw
from .spec_step import NATIVE, common_gap, merged_records

if TYPE_CHECKING:
    from .events import EventQueue
    from .replica import Replica
    from .window_metrics import RunLedger

_INF = math.inf


def advance_spec(rep: "Replica", lim: float, ledger: "RunLedger | None" = None,
                 events: "EventQueue | None" = None) -> float | None:
    """``rep`` has just planned a speculative iteration (``ITER``); apply it and the following ones
    while each ends by ``lim`` (no event that could touch the replica comes before; the cluster's
    ``_ahead_limit``) and nothing else could change the replica in between. Returns the end time of
    the iteration left planned (the one the caller schedules; None when the replica went idle).

    With ``ledger`` (the cluster's, where completions are counted) and ``events`` (its queue), an
    iteration in which a sequence finishes or a prompt chunk completes its prompt is applied here
    too when it ends strictly before every queued event (the completions then reach the ledger in
    the order the events would bring them): as the cluster's step event would (the same
    bookkeeping, ``Replica._finish``, ``ledger.complete``), then the ordinary ``plan``, and the
    stable iterations go on from there. Without them (a drain, which stops at the last completion)
    such an iteration is left to the event."""
    while True:
        e, again = _advance(rep, lim, ledger, events)
        if not again:
            return e


def first_event_time(events: "EventQueue | None") -> float:
    """Time of the earliest queued event of any kind (inf when none or no queue is given)."""
    ev = events.peek() if events is not None else None
    return ev[0] if ev is not None else _INF


def irregular_step(rep: "Replica", e: float, ledger: "RunLedger",
                   events: "EventQueue | None") -> tuple[float | None, bool]:
    """The planned iteration ending at ``e`` finishes a sequence or completes a prompt (not one
    handed off to a decode replica: the caller checked): when it ends strictly before every
    queued event, apply it as the cluster's step event would (``on_step_end``, the completions to
    ``ledger``, the ordinary ``plan``) and return ``(the new end, True)``; otherwise leave it to
    the event (``(e, False)``)."""
    if not e < first_event_time(events):
        return e, False  # another event comes first (or at the same time): it decides
    done, _handoffs = rep.on_step_end(e)
    if done:  # (a list: ``_finish``'s)
        ledger.complete(done)  # type: ignore[arg-type]
    return rep.plan(e), True


def _advance(rep: "Replica", lim: float, ledger: "RunLedger | None",
             events: "EventQueue | None") -> tuple[float | None, bool]:
    """One stretch of :func:`advance_spec` with the batch set up once: ``(end time, whether the
    ordinary plan ran at an iteration boundary here and a new stretch may follow)``."""
    e = rep.seg_end
    if not e <= lim:
        return e, False
    if (rep.state != ITER or rep.pending is not None or rep.max_run <= 1
            or rep.reload_debt_s or rep.api_pending or rep.block_end > rep.iterations):
        return e, False  # (an API-server stall or a multi-step block: the ordinary plan decides)
    decodes = rep.seg_decodes
    running = rep.running
    B = len(decodes)
    k = rep.spec_k
    chunks = rep.it_chunks
    cfg = rep.cfg
    sched = cfg.scheduler
    if chunks and completes_prompt(chunks):  # (the step event's code, without a set-up here)
        if ledger is None or hands_off(chunks):
            return e, False
        return irregular_step(rep, e, ledger, events)
    # chunked prefill (sarathi): the prompts still prefilling, in running order (``spec_chunks``)
    pfl = prefilling(rep, B, chunks) if sched == "sarathi" else None
    if pfl is None:
        if chunks or not B or B != len(running) or k <= 0:
            return e, False
    elif k <= 0:
        return e, False
    queued = bool(rep.waiting or rep.prio_waiting)
    if queued and sched not in ("vllm", "sarathi", "static"):
        return e, False
    csize = cfg.chunk_size
    budget0 = csize * cfg.pipeline_parallel - B  # sarathi's token budget after the decodes
    pc = rep.kv.prefix_caching
    kmax = k + 1
    # per sequence: the accepted count when alpha is 0 or 1, else 0 and the draw's comparison
    # table (``spec_draws``: the count ``min(int(log(1 - u) / log(alpha)) + 1, kmax)``)
    got = rep._draws(kmax)  # (``tenant_draws``' answer)
    lat: list[Draw] = got[0]
    ldef: Draw = got[1]
    nta = len(lat)
    win = rep.win
    ttbt = win.ttbt
    kv = rep.kv
    bs = kv.block_size
    bs1 = bs - 1
    lk = rep.lookahead
    quality = rep.quality
    recent_append = rep.recent_iter.append
    async_sched = rep.async_sched
    model = rep.model
    no_chunks: tuple = ()
    # a pure-decode iteration of the plain model takes ``a + b * S`` (``iteration_time_s``'s own
    # expression; (a, b) memoised per (B, k)): asked once per stretch, not per iteration
    linear = pfl is None and type(model) is ExecutionModel and model._pp == 1
    ca = cb = 0.0
    have_ab = False
    t0 = rep.seg_t0
    S = B
    for r in decodes:
        S += r.kv_tokens
    prop = B * k
    js = [0] * B  # per sequence: its accepted count (the record's weight)
    pv = [0.0] * B  # per sequence: its gap per token (the record's value)
    rec = win.tbt  # (a window reset cannot come inside this call: the recorders stay)
    wl: list = rec.w  # (int weights stay ints: the same float in ``TBTRecorder.arrays``)
    d0l, rstep, rn = rec.d0, rec.step, rec.n  # (records added per iteration, in sequence order)
    zeros, ones = [0.0] * B, [1] * B  # every record here is one value: step 0.0, n 1, added in bulk
    # ``win.merge_tbt``: an iteration whose sequences all have the first one's gap (nonzero: a
    # zero's sign stays its own) is recorded as one record per token count, weights summed
    merge = win.merge_tbt and NATIVE
    kcap = k + 2
    if ttbt is not None:  # per tenant with sequences here: its records and its sequences' positions
        tgroups: list[tuple[list[float], list, list[float], list[int], list[int], list[float], list[int]]] = []
        for ti in range(len(ttbt)):
            idx = [i for i in range(B) if decodes[i].tenant == ti]
            if idx:
                tr = ttbt[ti]
                tgroups.append((tr.d0, tr.w, tr.step, tr.n, idx, [0.0] * len(idx), [1] * len(idx)))
    buf = rep._ubuf
    nbuf = len(buf)
    ui = rep._ui
    tcur = -1 << 40  # the tenant whose draw spec is loaded below (none yet)
    j0 = 0
    a1 = b1 = a2 = b2 = a3 = 0.0
    tb: Any = None
    while e <= lim:
        # a chunk whose request lost its blocks to a priority admission: the ordinary event applies
        # it; one that completes its prompt (first token, a new decoding sequence): irregular
        irregular = False
        for r, c in chunks:
            if not r.kv_blocks:
                return e, False
            if r.prefilled_tokens + c >= r.prefill_target:
                irregular = True
        if irregular:
            if ledger is None or hands_off(chunks):
                return e, False
            return irregular_step(rep, e, ledger, events)
        # the iteration's acceptance draws (peeked: consumed only if it is applied here)
        p = ui
        s = 0
        for rq in decodes:
            t = rq.tenant
            if t != tcur:
                tcur = t
                j0, a1, b1, a2, b2, a3, tb = lat[t] if t < nta else ldef
            j = j0
            if not j:
                if p >= nbuf:  # the next block of the same stream, appended in order
                    buf = rep._ubuf = buf[ui:] + rep.rng.random(4096).tolist()
                    nbuf = len(buf)
                    p -= ui
                    rep._ui = ui = 0
                u = buf[p]
                p += 1
                if u < a1:
                    j = 1
                elif b1 <= u < a2:
                    j = 2
                elif b2 <= u < a3:
                    j = 3
                else:
                    j = table_draw(u, tb)
            if j >= rq.output_tokens - rq.generated_tokens:  # the sequence finishes
                if ledger is None:
                    return e, False  # the ordinary event applies this iteration
                irregular = True
                break
            js[s] = j
            s += 1
        if irregular and ledger is not None:  # the step event's own code (the draws peeked
            return irregular_step(rep, e, ledger, events)  # above are drawn again there)
        ui = rep._ui = p
        # ReplicaAdvance._apply_iter / _apply_spec at e, then Replica.plan's reserve_decode
        rep.now = e
        rep.iterations += 1
        recent_append(e - t0)
        if async_sched:
            rep.cutoff = t0
        toks = 0
        short = 0
        grow = None
        s = 0
        gc = common_gap(decodes, e) if merge else 0.0
        mixed = gc == 0.0  # (whether the iteration is recorded per sequence)
        for r in decodes:
            n = js[s]
            g = e - r.last_token_s
            per = g / n
            pv[s] = per
            s += 1
            if per > r.tbt_max_s:
                r.tbt_max_s = per
            r.tbt_sum_s += g
            r.last_token_s = e
            gn = r.generated_tokens = r.generated_tokens + n
            kt = r.kv_tokens = r.kv_tokens + n
            toks += n
            rem = r.output_tokens - gn
            nb = (kt + (lk if lk < rem else rem) + bs1) // bs
            if nb > r.kv_blocks:
                short += nb - r.kv_blocks
                if grow is None:
                    grow = [(r, nb)]
                else:
                    grow.append((r, nb))
        if B:
            if mixed or not merged_records(gc, js, kcap, d0l, wl, rstep, rn):
                d0l += pv
                wl += js  # (an int weight: the same float in ``TBTRecorder.arrays``)
                rstep += zeros
                rn += ones
            if ttbt is not None:  # each tenant's records, in sequence order (as add_tbt's)
                for td, tw, tst, tn, idx, tz, to in tgroups:
                    td += [pv[i] for i in idx]
                    tw += [js[i] for i in idx]
                    tst += tz
                    tn += to
            win.spec_proposed += prop
            win.spec_accepted += toks - B
            win.tokens_out += toks
            win.quality_token_sum += quality * toks
        left = 1
        if pfl is not None:
            # ReplicaAdvance._apply_iter's chunks (none completes its prompt: checked above), then
            # SarathiScheduler.plan's chunks for the prompts still prefilling, in running order
            if chunks:
                apply_chunks(rep, chunks, pc)
            chunks, pf, left = next_chunks(pfl, budget0, csize)
        free = kv.capacity_blocks - kv.used_blocks
        if short > free or (not B and not chunks) or (queued and left > 0
                            and not nothing_admits(rep, free - short if sched == "sarathi" else free)):
            # preemption or an admission at this boundary (or, never expected, an empty batch):
            rep.state = 0  # the ordinary plan decides
            if pfl is not None:
                rep.it_chunks = []  # (applied above; _apply_iter leaves it so)
            return rep.plan(e), True
        if short:
            rep._kv_advance(e)
            for r, nb in grow:  # type: ignore[union-attr]  # short > 0: grow is a list
                r.kv_blocks = nb
            kv.allocate(short)
            rep._kv_peak()
        S += toks
        rep.preempted_in_plan = False
        rep.blocked = False
        rep.cutoff = _INF
        rep.seg_t0 = t0 = e
        if linear:
            if not have_ab:
                ca, cb = rep._decode_coeffs(B, k)
                have_ab = True
            e = rep.seg_end = e + (ca + cb * S)
        elif pfl is None:
            e = rep.seg_end = e + model.iteration_time_s(no_chunks, B, S, k)
        else:
            rep.it_chunks = chunks
            e = rep.seg_end = e + rep._iter_time(pf, B, S, k if B else 0)
    return e, False


def nothing_admits(rep: "Replica", free: int) -> bool:
    """Whether ``try_admit`` refuses (without side effects) every request that could be the
    queue head at this boundary, ``free`` blocks being free when it is asked. False when unsure."""
    running = rep.running
    cap = rep.cfg.batch_cap
    kv = rep.kv
    bs = kv.block_size
    if rep.cfg.scheduler == "static":
        return True  # admits only into an empty replica
    for q in (rep.prio_waiting, rep.waiting):
        if not q:
            continue
        r = q[0]
        transfer = r.prefilled_tokens >= r.prefill_target
        if r.block_hashes and kv.prefix_caching and not transfer:
            return False  # the prefix lookup decides: leave it to try_admit
        if len(running) < cap:
            if transfer:
                mx = r.prompt_tokens + r.output_tokens - 1
                tokens = r.prefill_target + rep.lookahead
                if tokens > mx:
                    tokens = mx
            else:
                tokens = r.prefill_target
            if free - (-(-tokens // bs)) >= kv.watermark_blocks:
                return False
        if rep.priority_on and r.priority == 1:
            for x in running:
                if x.priority == 0:
                    return False
    return True
