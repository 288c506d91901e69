"""One speculative decoding step of a replica's decoding sequences (the per-sequence accepted
tokens, TBT records and counters): the body of ``ReplicaAdvance._apply_spec``, kept beside the
replica's other stepping code (``replica_advance.py``) in a module of its own for size.
``spec_ahead.advance_spec`` inlines the same bookkeeping for several iterations at once
(``tests/sim/test_sim_spec_ahead.py`` fails if the two diverge)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .spec_draws import Draw, table_draw

if TYPE_CHECKING:
    from .metrics import ReplicaWindow
    from .request import Request

NATIVE: bool = not __file__.endswith(".py")
"""Whether this module runs compiled (``inferencegym.accel``). Only then do the speculative steps
merge their TBT records (``ReplicaWindow.merge_tbt``): there the per-sequence counting costs a few
instructions, in pure Python more bytecode than the readout saves (the same percentiles either way)."""


def apply_spec(decodes: list[Request], now: float, k: int, got: tuple, win: "ReplicaWindow", quality: float,
               buf: list[float], ui: int, rng: Any) -> tuple[list[float], int]:
    """Speculative step: each sequence accepts a truncated-geometric number of draft tokens
    (each accepted with probability alpha until the first rejection) plus one target token:
    ``min(Geometric(1 - alpha), k + 1)`` tokens, drawn by inversion from uniforms that the
    replica's Generator produces in blocks (cheap per draw, still one seeded stream): the count
    ``min(int(log(1 - u) / log(alpha)) + 1, k + 1)``, found by comparing ``u`` with the
    thresholds where it steps (``spec_draws``, bit-identical). The replica's state comes as
    arguments (its depth ``k``, ``got`` = ``tenant_draws``' answer for ``k + 1``, its window,
    quality factor, uniform block ``buf`` read from ``ui`` and Generator ``rng``; typed for the
    compiled core without importing the replica, which would make an import circle); returns the
    block and the position after the draws taken.
    """
    # per tenant: the accepted count when alpha is 0 or 1, else 0 and the draw's comparison table
    # (``spec_draws``: the same count as ``min(int(log(1 - u) / log(alpha)) + 1, kmax)``)
    lat: list[Draw] = got[0]
    ldef: Draw = got[1]
    nta = len(lat)
    rec = win.tbt
    wl: list = rec.w  # (int weights stay ints: the same float in ``TBTRecorder.arrays``)
    d0l = rec.d0  # (add_tbt's records, inline, added after the loop; step 0.0 and n 1 in bulk)
    B = len(decodes)
    pv = [0.0] * B  # per sequence: its gap per token (the record's value) ...
    nv = [0] * B  # ... and its tokens (the record's weight)
    # ``win.merge_tbt``: a step whose sequences all have the first one's gap (nonzero: a zero's
    # sign stays its own) is recorded as one record per token count (``merged_records``)
    gc = common_gap(decodes, now) if win.merge_tbt and NATIVE else 0.0
    mixed = gc == 0.0  # (whether the step is recorded per sequence)
    ttbt = win.ttbt
    if ttbt is not None:  # per tenant: its records' values, weights and count
        tda: list[Callable[[float], None]] = [tr.d0.append for tr in ttbt]
        twa: list[Callable[[Any], None]] = [tr.w.append for tr in ttbt]
        tcount = [0] * len(ttbt)
    nbuf = len(buf)
    toks = 0
    acc = 0
    s = 0
    tcur = -1 << 40  # the tenant whose draw spec is loaded (none yet)
    j0 = 0
    a1 = b1 = a2 = b2 = a3 = 0.0
    tb: Any = None
    for r in decodes:
        t = r.tenant
        if t != tcur:
            tcur = t
            j0, a1, b1, a2, b2, a3, tb = lat[t] if t < nta else ldef
        j = j0
        if not j:
            if ui >= nbuf:
                buf = rng.random(4096).tolist()
                nbuf = len(buf)
                ui = 0
            u = buf[ui]
            ui += 1
            if u < a1:
                j = 1
            elif b1 <= u < a2:
                j = 2
            elif b2 <= u < a3:
                j = 3
            else:
                j = table_draw(u, tb)
        acc += j
        n = r.output_tokens - r.generated_tokens
        if j < n:
            n = j
        gap = now - r.last_token_s
        per = gap / n
        pv[s] = per
        nv[s] = n  # (an int weight: the same float in ``TBTRecorder.arrays``)
        s += 1
        if ttbt is not None and t >= 0:
            tda[t](per)
            twa[t](n)
            tcount[t] += 1
        if per > r.tbt_max_s:
            r.tbt_max_s = per
        r.tbt_sum_s += gap
        r.last_token_s = now
        r.generated_tokens += n
        r.kv_tokens += n
        toks += n
    if mixed or not merged_records(gc, nv, k + 2, d0l, wl, rec.step, rec.n):
        d0l += pv
        wl += nv
        rec.step += [0.0] * B
        rec.n += [1] * B
    if ttbt is not None:
        for tr, c in zip(ttbt, tcount):
            if c:
                tr.step += [0.0] * c
                tr.n += [1] * c
    win.spec_proposed += B * k
    win.spec_accepted += acc - B
    win.tokens_out += toks
    win.quality_token_sum += quality * toks
    return buf, ui


def common_gap(decodes: list[Request], now: float) -> float:
    """The gap ``now - last_token_s`` every sequence of ``decodes`` shares (the loops' per-sequence
    gap, bit for bit), or 0.0 when they differ or there are none (a zero gap is never merged: its
    sign stays its own record)."""
    if not decodes:
        return 0.0
    gc = now - decodes[0].last_token_s
    if gc == 0.0:
        return 0.0
    for r in decodes:
        if now - r.last_token_s != gc:
            return 0.0
    return gc


def merged_records(gap: float, ns: list[int], kcap: int, d0l: list[float], wl: list, steps: list[float],
                   counts: list[int]) -> bool:
    """Record a step's sequences that all had the gap ``gap`` (nonzero) and ``ns`` tokens as one
    record per token count ``n``: ``(gap / n, 0.0, 1, n * sequences)``, the weighted multiset of
    values of their per-sequence records (``gap / n``, weight ``n``) with equal values' int weights
    summed, so the same inverted-CDF percentiles in fewer records
    (``ClusterReadout.percentiles_only_tbt``). False, recording nothing, when a count is outside
    ``1 .. max(3, kcap - 1)`` (the caller records per sequence)."""
    c1 = c2 = c3 = 0
    hist: list[int] = []
    for n in ns:
        if n == 1:
            c1 += 1
        elif n == 2:
            c2 += 1
        elif n == 3:
            c3 += 1
        elif 3 < n < kcap:
            if not hist:
                hist = [0] * kcap
            hist[n] += 1
        else:
            return False
    if c1:
        d0l.append(gap / 1)  # (each sequence's ``gap / n``, bit for bit)
        wl.append(c1)
        steps.append(0.0)
        counts.append(1)
    if c2:
        d0l.append(gap / 2)
        wl.append(c2 * 2)
        steps.append(0.0)
        counts.append(1)
    if c3:
        d0l.append(gap / 3)
        wl.append(c3 * 3)
        steps.append(0.0)
        counts.append(1)
    for i in range(4, len(hist)):
        c = hist[i]
        if c:
            d0l.append(gap / i)
            wl.append(c * i)
            steps.append(0.0)
            counts.append(1)
    return True
