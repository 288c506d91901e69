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
    d0a, sta, na, wa = rec.d0.append, rec.step.append, rec.n.append, rec.w.append
    ttbt = win.ttbt  # (add_tbt's records, inline: one call per sequence was most of the step)
    buf = rep._ubuf
    ui = rep._ui
    toks = 0
    acc = 0
    for r in decodes:
        t = r.tenant
        lg = lat[t] if t < nta else ldef
        if lg < 0:
            if ui >= len(buf):
                buf = rep._ubuf = rep.rng.random(4096).tolist()
                ui = 0
            u = 1.0 - buf[ui]  # in (0, 1]
            ui += 1
            j = int(log(u) / lg) + 1
            if j > kmax:
                j = kmax
        else:
            j = lg
        acc += j - 1
        n = r.output_tokens - r.generated_tokens
        if j < n:
            n = j
        gap = now - r.last_token_s
        per = gap / n
        fn = float(n)
        d0a(per)
        sta(0.0)
        na(1)
        wa(fn)
        if ttbt is not None and t >= 0:
            tr = ttbt[t]
            tr.d0.append(per)
            tr.step.append(0.0)
            tr.n.append(1)
            tr.w.append(fn)
        if per > r.tbt_max_s:
            r.tbt_max_s = per
        r.tbt_sum_s += gap
        r.last_token_s = now
        r.generated_tokens += n
        r.kv_tokens += n
        toks += n
    rep._ui = ui
    win.spec_proposed += len(decodes) * k
    win.spec_accepted += acc
    win.tokens_out += toks
    win.quality_token_sum += rep.quality * toks
