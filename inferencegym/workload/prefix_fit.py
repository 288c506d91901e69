"""Fitting the prefix-sharing generators (`PrefixWorkloadSpec`) to a trace with hash chains.

``python -m inferencegym.workload.prefix_fit [TRACE.jsonl]`` rebuilds the shipped
``inferencegym/data/fits/mooncake_*.json`` from the Mooncake FAST'25 synthetic trace (default
``../shared/reference/traces/mooncake/synthetic_trace.jsonl``). The fits hold figures only.

What is measured on the trace (trace blocks, ids chained with `hashchain.trace_chain`):

- *follow-ups*: request ``i`` follows ``j < i`` when its chain holds ``j``'s last full block (the
  deepest such ``j`` is its parent); a session is a request that follows nobody plus its
  descendants. Turns per session, the parent-to-child arrival gaps (think time) and the prompt
  increments come from these trees;
- *prefix groups*: requests (or, for the multi-turn fit, session roots) grouped by their first
  block; a group's prefix is the longest run of blocks all its members share. Prefix lengths (one
  per group), the messages after them, and the prompts of singletons are quantile tables;
- the pool size ``num_prefixes``, popularity ``zipf_s`` and ``unique_share`` are chosen so that the
  *expected* number of groups with >= 2 members, the requests in them and the top-10 share equal
  the trace's (closed form under multinomial draws, grid search, no randomness);
- the agent preset has no counterpart in the synthetic trace (it has no agent loops): it takes the
  prefix pool of the shared-prefix fit, steps as long as the trace's messages after a shared
  prefix, the gaps between consecutive requests of a prefix group as think times, and the mean
  number of steps that makes the generated infinite-cache hit bound equal the trace's;
- the multi-turn preset's turn counts (stretched by 1..3x) and the copula correlation of turns with
  the first prompt (from the Spearman value up to 0.95) are the pair whose generated hit bound is
  closest to the trace's (method of simulated moments, seed 0): the trace's follow-ups hang on its
  longest prompts, which rank correlation alone understates.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from inferencegym.workload.prefix_loaders import load_prefix_trace
from inferencegym.workload.prefix_stats import prefix_stats

from .hashchain import trace_chain
from .prefix_gen import FITS_DIR, LEVELS, PREFIX_FITS, PrefixWorkloadSpec, generate_prefix_workload
from .trace import Workload

__all__ = ["fit_prefix_specs", "session_trees", "prefix_groups", "fast_hit_bound"]


def _q(x) -> tuple[float, ...]:
    x = np.asarray(x, float)
    if x.size == 0:
        return tuple(1.0 for _ in LEVELS)
    return tuple(float(v) for v in np.maximum.accumulate(np.round(np.quantile(x, LEVELS), 3)))


def _chains(w: Workload) -> tuple[list[np.ndarray], np.ndarray]:
    B = w.hash_block_tokens
    chains = [trace_chain(h) for h in w.hash_ids]
    full = np.array([min(int(p) // B, c.size) for p, c in zip(w.prompt_tokens, chains)], np.int64)
    return chains, full


def session_trees(w: Workload) -> np.ndarray:
    """Parent request of every request (-1 for session starts), see the module docstring."""
    chains, full = _chains(w)
    ends: dict[int, int] = {}
    parent = np.full(len(w), -1, np.int64)
    for i, c in enumerate(chains):
        vals = c.tolist()
        for pos in range(len(vals) - 1, -1, -1):
            j = ends.get(vals[pos])
            if j is not None:
                parent[i] = j
                break
        if full[i]:
            ends.setdefault(vals[full[i] - 1], i)
    return parent


def prefix_groups(w: Workload, rows: np.ndarray) -> dict:
    """Groups of ``rows`` by first block: sizes, per-group shared prefix tokens, messages, singletons."""
    chains, _ = _chains(w)
    B = w.hash_block_tokens
    groups: dict[int, list[int]] = {}
    for i in rows.tolist():
        if chains[i].size:
            groups.setdefault(int(chains[i][0]), []).append(i)
    sizes, prefix, message, single = [], [], [], []
    for members in groups.values():
        sizes.append(len(members))
        if len(members) == 1:
            single.append(int(w.prompt_tokens[members[0]]))
            continue
        cs = [chains[i] for i in members]
        m = min(c.size for c in cs)
        lcp = 0
        while lcp < m and all(c[lcp] == cs[0][lcp] for c in cs[1:]):
            lcp += 1
        prefix.append(lcp * B)
        message += [max(int(w.prompt_tokens[i]) - lcp * B, 1) for i in members]
    no_chain = [int(w.prompt_tokens[i]) for i in rows.tolist() if not chains[i].size]
    return {"sizes": np.asarray(sizes), "prefix": prefix, "message": message, "single": single + no_chain}


def _fit_popularity(sizes: np.ndarray, n: int) -> tuple[int, float, float]:
    """(K, s, unique_share) whose expected groups>=2, requests in them and top-10 share match."""
    g2 = int((sizes >= 2).sum())
    r2 = int(sizes[sizes >= 2].sum())
    top10 = float(np.sort(sizes)[::-1][:10].sum() / n)
    best, arg = np.inf, (max(g2, 1), 0.0, 0.0)
    for K in np.unique(np.geomspace(max(g2, 2), 20 * max(g2, 2), 25).astype(int)):
        logr = np.log(np.arange(1, K + 1))
        for s in np.arange(0.0, 2.01, 0.05):
            p = np.exp(-s * logr)
            p /= p.sum()
            for u in np.arange(0.0, 0.96, 0.05):
                M = n * (1 - u)
                p0 = np.exp(M * np.log1p(-p))
                p1 = M * p * p0 / (1 - p)
                eg2 = float((1 - p0 - p1).sum())
                er2 = float(M - p1.sum())
                etop = float(M * p[:10].sum() / n)
                loss = ((eg2 - g2) / g2) ** 2 + ((er2 - r2) / r2) ** 2 + ((etop - top10) / top10) ** 2
                if loss < best:
                    best, arg = loss, (int(K), float(round(s, 2)), float(round(u, 2)))
    return arg


def fast_hit_bound(w: Workload) -> float:
    """Infinite-cache hit bound of a *generated* workload on its own blocks (generated ids are
    unique per prefix, so no chaining is needed); equals `prefix_stats` at ``block_tokens = B``."""
    B = w.hash_block_tokens
    ids = [h[: int(p) // B] for h, p in zip(w.hash_ids, w.prompt_tokens)]
    req = np.repeat(np.arange(len(ids)), [c.size for c in ids])
    flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    _, first, inv = np.unique(flat, return_index=True, return_inverse=True)
    return float((req[first][inv] < req).sum() * B / w.prompt_tokens.sum())


def _geometric_turns(mean: float) -> tuple[float, ...]:
    from scipy.stats import geom

    if mean <= 1.0:
        return tuple(1.0 for _ in LEVELS)
    lv = np.clip(np.asarray(LEVELS), 1e-6, 1 - 1e-4)
    return _q_from(geom(1.0 / mean).ppf(lv))


def _q_from(v) -> tuple[float, ...]:
    return tuple(float(x) for x in np.maximum.accumulate(np.asarray(v, float)))


def fit_prefix_specs(w: Workload, *, source: str = "") -> dict[str, PrefixWorkloadSpec]:
    """The three fitted specs (``shared_prefix``, ``multiturn``, ``agent``) for a trace with chains."""
    if w.hash_ids is None:
        raise ValueError("fitting prefix generators needs a workload with hash chains")
    n, span = len(w), max(w.span_s, 1e-9)
    out_q = _q(w.output_tokens)
    ones = tuple(1.0 for _ in LEVELS)
    zeros = tuple(0.0 for _ in LEVELS)
    every = np.arange(n)
    g = prefix_groups(w, every)
    K, s, u = _fit_popularity(g["sizes"], n)
    shared = PrefixWorkloadSpec(
        kind="shared_prefix", session_rate_per_s=n / span, num_prefixes=K, zipf_s=s, unique_share=u,
        prefix_tokens=_q(g["prefix"]), first_message_tokens=_q(g["message"]),
        unique_prompt_tokens=_q(g["single"]), turn_message_tokens=ones, output_tokens=out_q, turns=ones,
        think_time_s=zeros, block_tokens=16, source=source)
    parent = session_trees(w)
    roots = np.flatnonzero(parent < 0)
    kids = np.flatnonzero(parent >= 0)
    depth_root = np.arange(n)
    for i in range(n):  # parents come first: the root of i is the root of its parent
        if parent[i] >= 0:
            depth_root[i] = depth_root[parent[i]]
    turns = np.bincount(depth_root, minlength=n)[roots]
    inc = w.prompt_tokens[kids] - w.prompt_tokens[parent[kids]]
    with_output = bool(np.median(inc) > np.median(w.output_tokens[parent[kids]])) if kids.size else True
    msg = inc - (w.output_tokens[parent[kids]] if with_output else 0)
    from scipy.stats import spearmanr

    rho_s = float(spearmanr(w.prompt_tokens[roots], turns).statistic) if roots.size > 2 else 0.0
    rho = float(np.clip(2 * np.sin(np.pi * np.nan_to_num(rho_s) / 6), -0.99, 0.99))
    gr = prefix_groups(w, roots)
    Kr, sr, ur = _fit_popularity(gr["sizes"], roots.size)
    multiturn = replace(
        shared, kind="multiturn", session_rate_per_s=roots.size / span, num_prefixes=Kr, zipf_s=sr,
        unique_share=ur, prefix_tokens=_q(gr["prefix"]), first_message_tokens=_q(gr["message"]),
        unique_prompt_tokens=_q(gr["single"]), turn_message_tokens=_q(np.maximum(msg, 1)),
        turns=_q(turns), think_time_s=_q(w.arrival_s[kids] - w.arrival_s[parent[kids]]),
        context_includes_output=with_output, turns_prompt_rho=round(rho, 4))
    # agent: gaps between consecutive requests of a prefix group as think times
    chains, _ = _chains(w)
    first = np.array([int(c.view(np.int64)[0]) if c.size else -1 for c in chains], np.int64)
    order = np.lexsort((w.arrival_s, first))
    same = (first[order][1:] == first[order][:-1]) & (first[order][1:] != -1)
    gaps = (w.arrival_s[order][1:] - w.arrival_s[order][:-1])[same]
    agent = replace(shared, kind="agent", unique_share=0.0, turn_message_tokens=_q(g["message"]),
                    think_time_s=_q(gaps), context_includes_output=True)

    target = prefix_stats(w, block_tokens=16)["hit_bound"]
    rate = n / span
    shared = _at_rate(shared, span, rate)
    stretched = [replace(multiturn, turns=_q_from(1 + (np.asarray(multiturn.turns) - 1) * f),
                         turns_prompt_rho=r)
                 for f in (1.0, 2.0, 3.0) for r in sorted({multiturn.turns_prompt_rho, 0.7, 0.95})]
    multiturn = _closest_hit_bound(stretched, span, rate, target)
    agent = _closest_hit_bound([replace(agent, turns=_geometric_turns(m))
                                for m in (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0)], span, rate, target)
    return {"shared_prefix": shared, "multiturn": multiturn, "agent": agent}


def _at_rate(spec: PrefixWorkloadSpec, span: float, rate: float) -> PrefixWorkloadSpec:
    """Session rate scaled so one generated ``span`` (seed 0) has the trace's request rate (later
    turns that fall after the end are lost, as in the trace's window)."""
    spec = replace(spec, session_rate_per_s=rate / spec.mean_turns())
    got = len(generate_prefix_workload(spec, span, np.random.default_rng(0))) / span
    return replace(spec, session_rate_per_s=spec.session_rate_per_s * rate / max(got, 1e-9))


def _closest_hit_bound(cands: list[PrefixWorkloadSpec], span: float, rate: float, target: float
                       ) -> PrefixWorkloadSpec:
    best = None
    for c in cands:
        c = _at_rate(c, span, rate)
        hb = fast_hit_bound(generate_prefix_workload(c, span, np.random.default_rng(0)))
        if best is None or abs(hb - target) < best[0]:
            best = (abs(hb - target), c)
    return best[1]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    here = Path(__file__).resolve().parents[2]
    path = Path(argv[0]) if argv else here.parent / "shared/reference/traces/mooncake/synthetic_trace.jsonl"
    w = load_prefix_trace(path, "mooncake")
    specs = fit_prefix_specs(w, source=f"{path.name} (Mooncake FAST'25 synthetic trace)")
    for kind, spec in specs.items():
        dst = FITS_DIR / PREFIX_FITS[f"mooncake_{kind}"]
        spec.save(dst)
        print(f"wrote {dst}")


if __name__ == "__main__":
    main()
