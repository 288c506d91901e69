"""Prefix-sharing statistics of a workload with hash chains (`prefix_stats`).

All figures are computed on the simulator's blocks (``block_tokens`` per block, default 16) after
mapping the trace's hash ids (`inferencegym.workload.hashchain`), in arrival order:

- ``hit_bound``: the infinite-cache hit bound, the share of all prompt tokens that lie in full blocks
  some earlier request already had (an LRU cache of unlimited size with vLLM's prefix matching
  would serve exactly these; chained hashes make "seen before" a prefix property);
- ``reuse``: for every block seen before, the distance back to its previous use, in seconds and in
  requests (p10/p50/p90/p99, and the histogram of seconds in log bins);
- ``popularity``: requests grouped by their first ``prefix_blocks`` blocks (the shared system
  prompt / document): number of prefixes, share of requests in the top 1/10/100, share whose prefix
  is shared at all, and the Zipf exponent ``s`` (``count ~ rank^-s``, maximum likelihood with
  `scipy.optimize.minimize_scalar`);
- ``turns``: a request whose prompt contains every full block of an earlier request's prompt is a
  follow-up turn of it; ``mean_turns`` = requests / requests that follow up nobody (session starts).
"""

from __future__ import annotations

import numpy as np

from .hashchain import sim_block_hashes
from .trace import Workload

__all__ = ["prefix_stats", "zipf_exponent", "block_hash_table"]

_QS = (10, 50, 90, 99)


def block_hash_table(w: Workload, block_tokens: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(request index, simulator block hash) of every full block, flattened in arrival order."""
    if w.hash_ids is None:
        raise ValueError("prefix statistics need hash chains (a mooncake/bailian trace, a pool with "
                         "hash_ids, or a prefix generator); this workload has none")
    B = w.hash_block_tokens
    chains = [np.asarray(sim_block_hashes(h, int(p), trace_block_tokens=B, sim_block_tokens=block_tokens), np.int64)
              for h, p in zip(w.hash_ids, w.prompt_tokens.tolist())]
    lengths = np.fromiter((c.size for c in chains), np.int64, count=len(chains))
    req = np.repeat(np.arange(len(chains), dtype=np.int64), lengths)
    flat = np.concatenate(chains) if chains else np.zeros(0, np.int64)
    return req, flat


def zipf_exponent(counts: np.ndarray) -> float:
    """Maximum-likelihood Zipf exponent of group sizes: P(rank r) = r^-s / H(K, s), r = 1..K."""
    from scipy.optimize import minimize_scalar

    c = np.sort(np.asarray(counts, dtype=float))[::-1]
    c = c[c > 0]
    if c.size < 2:
        return float("nan")
    logr = np.log(np.arange(1, c.size + 1))
    n, weighted = c.sum(), float((c * logr).sum())

    def nll(s: float) -> float:
        return s * weighted + n * float(np.log(np.exp(-s * logr).sum()))

    return float(minimize_scalar(nll, bounds=(0.0, 6.0), method="bounded").x)


def _labelled_turns(w: Workload) -> float | None:
    """Requests per conversation from the workload's own labels: Bailian's ``parent`` (-1 starts a
    conversation) or a generator's ``session``; None without labels."""
    if not len(w):
        return None
    if "parent" in w.ints:
        starts = int((w.ints["parent"] < 0).sum())
        return len(w) / starts if starts else None
    if "session" in w.ints:
        return len(w) / int(np.unique(w.ints["session"]).size)
    return None


def _pcts(x: np.ndarray) -> dict[str, float | None]:
    if x.size == 0:
        return {f"p{q}": None for q in _QS} | {"mean": None}
    return {f"p{q}": float(v) for q, v in zip(_QS, np.percentile(x, _QS))} | {"mean": float(x.mean())}


def prefix_stats(w: Workload, *, block_tokens: int = 16, prefix_blocks: int = 1,
                 top_k: tuple[int, ...] = (1, 10, 100)) -> dict:
    """Hit bound, reuse distances, prefix popularity and turns (see the module docstring)."""
    req, h = block_hash_table(w, block_tokens)
    n = len(w)
    prompt_total = int(w.prompt_tokens.sum())
    # one stable sort by hash: groups of equal hashes, positions ascending inside a group
    order = np.argsort(h, kind="stable")
    hs = h[order]
    same = np.zeros(h.size, bool)
    same[1:] = hs[1:] == hs[:-1]
    group = np.cumsum(~same) - 1
    first_req = req[order[~same]][group]          # request that introduced each sorted element's hash
    seen_sorted = first_req < req[order]
    hit_tokens = int(seen_sorted.sum()) * block_tokens
    # reuse distance: previous occurrence of the same hash
    cur, prev = order[same], order[np.flatnonzero(same) - 1]
    keep = req[prev] < req[cur]  # (a chain never repeats a hash; kept for safety)
    cur, prev = cur[keep], prev[keep]
    dt = w.arrival_s[req[cur]] - w.arrival_s[req[prev]]
    dreq = (req[cur] - req[prev]).astype(float)
    edges = np.concatenate(([0.0], np.logspace(-2, 5, 15)))
    hist, _ = np.histogram(dt, bins=edges)
    # popularity of the first prefix_blocks blocks
    nblocks = np.bincount(req, minlength=n)
    starts = np.concatenate(([0], np.cumsum(nblocks)[:-1]))
    has = nblocks >= prefix_blocks
    roots = h[starts[has] + prefix_blocks - 1]
    _, counts = np.unique(roots, return_counts=True)
    counts = np.sort(counts)[::-1]
    with_root = int(counts.sum())
    popularity = {
        "prefix_tokens": prefix_blocks * block_tokens, "requests_with_prefix": with_root,
        "distinct_prefixes": int(counts.size),
        "shared_request_share": float(counts[counts > 1].sum() / with_root) if with_root else None,
        "zipf_s": zipf_exponent(counts) if counts.size >= 2 else None,
        **{f"top{k}_share": (float(counts[:k].sum() / with_root) if with_root else None) for k in top_k},
    }
    # turns: request i follows up j < i if i holds the block that ends j's last full *trace* block
    # (a trace's partial last block is the request's own; with S | B that block's hash is the one
    # of the simulator block ending at the same token)
    B = w.hash_block_tokens
    full_trace = np.minimum(w.prompt_tokens // B, np.fromiter((c.size for c in w.hash_ids), np.int64, count=n))
    end_blocks = (full_trace * B) // block_tokens if B % block_tokens == 0 else nblocks
    end_blocks = np.minimum(end_blocks, nblocks)
    ok = end_blocks > 0
    last = h[(starts + end_blocks - 1)[ok]]
    last_req = np.flatnonzero(ok)
    lu, li = np.unique(last, return_index=True)  # earliest request ending with each hash
    pos = np.searchsorted(lu, h)
    pos = np.minimum(pos, max(lu.size - 1, 0))
    hit = (lu.size > 0) & (lu[pos] == h) if lu.size else np.zeros(h.size, bool)
    follows = np.zeros(n, bool)
    if lu.size:
        earliest = last_req[li][pos]
        follows[req[hit & (earliest < req)]] = True
    starts_n = int(n - follows.sum())
    return {
        "block_tokens": block_tokens, "requests": n, "prompt_tokens": prompt_total,
        "distinct_blocks": int((~same).sum()),
        "hit_bound": hit_tokens / prompt_total if prompt_total else 0.0,
        "hit_tokens_bound": hit_tokens,
        "reuse": {"seconds": _pcts(dt), "requests": _pcts(dreq),
                  "seconds_hist": {"edges_s": edges.tolist(), "counts": hist.tolist()}},
        "popularity": popularity,
        "turns": {"follow_up_share": float(follows.mean()) if n else 0.0,
                  "sessions": starts_n, "mean_turns": n / starts_n if starts_n else None,
                  "mean_turns_labelled": _labelled_turns(w)},
        "mean_prompt_tokens": float(w.prompt_tokens.mean()) if n else 0.0,
        "mean_output_tokens": float(w.output_tokens.mean()) if n else 0.0,
    }


def format_prefix_compare(a: dict | None, b: dict | None) -> list[tuple[str, str, str, str]]:
    """Rows (metric, A, B, B vs A) of two `prefix_stats` results (either may be None: no chains)."""

    def get(d, *path):
        for p in path:
            if d is None:
                return None
            d = d.get(p)
        return d

    def f(x, nd=3):
        return "-" if x is None or not np.isfinite(x) else f"{x:.{nd}g}"

    def rel(x, y):
        return "" if x is None or y is None or not x else f"{100 * (y - x) / x:+.1f}%"

    rows = []
    for label, path in (("infinite-cache hit bound", ("hit_bound",)),
                        ("reuse distance p50 (s)", ("reuse", "seconds", "p50")),
                        ("reuse distance p90 (s)", ("reuse", "seconds", "p90")),
                        ("reuse distance p50 (requests)", ("reuse", "requests", "p50")),
                        ("distinct prefixes", ("popularity", "distinct_prefixes")),
                        ("requests with a shared prefix", ("popularity", "shared_request_share")),
                        ("top-10 prefix share", ("popularity", "top10_share")),
                        ("prefix Zipf exponent", ("popularity", "zipf_s")),
                        ("mean turns per session", ("turns", "mean_turns"))):
        x, y = get(a, *path), get(b, *path)
        rows.append((label, f(x, 4), f(y, 4), rel(x, y)))
    return rows
