"""One speculative decoding step of a replica's decoding sequences (the per-sequence accepted
tokens, TBT records and counters): the body of ``ReplicaAdvance._apply_spec``, kept beside the
replica's other stepping code (``replica_advance.py``) in a module of its own for size.
``spec_ahead.advance_spec`` inlines the same bookkeeping for several iterations at once
(``tests/sim/test_sim_spec_ahead.py`` fails if the two diverge)."""

from __future__ import annotations

import math
from typing import Any

def apply_spec(rep: Any, decodes: list, now: float) -> None:
    """Speculative step: each sequence accepts a truncated-geometric number of draft tokens
    (each accepted with probability alpha until the first rejection) plus one target token:
    ``min(Geometric(1 - alpha), k + 1)`` tokens, drawn by inversion from uniforms that the
    replica's Generator produces in blocks (cheap per draw, still one seeded stream). ``rep``: the
    replica (a ``ReplicaAdvance``; not imported here, which would make an import circle)."""
    k = rep.spec_k
    kmax = k + 1
    log = math.log
    # per tenant: log(alpha) (< 0) for a draw, or the accepted count when alpha is 0 or 1
    da = rep.default_alpha
    lat = []
    for x in rep.tenant_alpha:
        a = da if x is None else x
        lat.append(1 if a <= 0.0 else (kmax if a >= 1.0 else log(a)))
    nta = len(lat)
    ldef = 1 if da <= 0.0 else (kmax if da >= 1.0 else log(da))
    win = rep.win
    rec = win.tbt
    d0a, wa = rec.d0.append, rec.w.append  # (add_tbt's records, inline; step 0.0 and n 1 added in bulk)
    ttbt = win.ttbt
    if ttbt is not None:  # per tenant: its records' values, weights and count
        tda = [tr.d0.append for tr in ttbt]
        twa = [tr.w.append for tr in ttbt]
        tcount = [0] * len(ttbt)
    buf = rep._ubuf
    nbuf = len(buf)
    ui = rep._ui
    toks = 0
    acc = 0
    for r in decodes:
        t = r.tenant
        lg = lat[t] if t < nta else ldef
        if lg < 0:
            if ui >= nbuf:
                buf = rep._ubuf = rep.rng.random(4096).tolist()
                nbuf = len(buf)
                ui = 0
            j = int(log(1.0 - buf[ui]) / lg) + 1  # 1 - u in (0, 1]
            ui += 1
            if j > kmax:
                j = kmax
        else:
            j = lg
        acc += j
        n = r.output_tokens - r.generated_tokens
        if j < n:
            n = j
        gap = now - r.last_token_s
        per = gap / n
        d0a(per)
        wa(n)  # (an int weight: the same float in ``TBTRecorder.arrays``)
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
    rep._ui = ui
    B = len(decodes)
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
    win.quality_token_sum += rep.quality * toks
