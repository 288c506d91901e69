"""Request-level arrivals from ServeGen per-client window files.

ServeGen (Xiang et al., arXiv:2505.09999) publishes, per API client and per 10-minute window, the
request rate and the inter-arrival law fitted in that window (``iat_dist`` Gamma or Weibull with
scipy ``shape``/``scale``). `servegen_arrivals` draws arrivals the way ServeGen's own generator
does: per client and window, i.i.d. inter-arrivals from the window's law, rescaled so their mean
is 1/rate; clients are superposed. The window files are read from Parquet (columns
``client_id, window_start_s, rate, cv, iat_dist, shape, scale``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["servegen_arrivals"]


def servegen_arrivals(windows_path: str | Path, *, start_s: float, duration_s: float,
                      rng: np.random.Generator, clients: list[int] | None = None,
                      max_clients: int | None = None) -> np.ndarray:
    """Arrival times (from 0) for the windows covering ``[start_s, start_s + duration_s)``.

    ``clients``: ids to include (default: every client active in the span, by id, at most
    ``max_clients``).
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(str(windows_path))
    need = {"client_id", "window_start_s", "rate", "iat_dist", "shape", "scale"}
    if not need <= set(t.column_names):
        raise ValueError(f"{windows_path}: ServeGen windows need columns {sorted(need)}, has {t.column_names}")
    end = start_s + duration_s
    m = pc.and_(pc.greater(pc.add(t["window_start_s"], 600), start_s), pc.less(t["window_start_s"], end))
    d = t.filter(m).to_pydict()
    ids = sorted({c for c, r in zip(d["client_id"], d["rate"]) if r > 0})
    if clients is not None:
        ids = [c for c in ids if c in set(clients)]
    if max_clients is not None:
        ids = ids[:max_clients]
    keep = set(ids)
    out = []
    rows = sorted(zip(d["client_id"], d["window_start_s"], d["rate"], d["iat_dist"], d["shape"], d["scale"]))
    for cid, w0, rate, law, shape, scale in rows:
        if cid not in keep or rate <= 0 or law not in ("Gamma", "Weibull") or shape <= 0:
            continue
        n = int(rate * 600 * 1.5) + 20
        if law == "Gamma":
            x = rng.gamma(shape, 1.0, n)
        else:
            x = rng.weibull(shape, n)
        x = x / x.mean() / rate  # ServeGen rescales sampled IATs to hit the window rate
        a = w0 + np.cumsum(x)
        a = a[a < w0 + 600]
        out.append(a[(a >= start_s) & (a < end)] - start_s)
    return np.sort(np.concatenate(out)) if out else np.zeros(0)
