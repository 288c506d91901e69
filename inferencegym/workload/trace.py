"""The `Workload`: a column table of requests (arrival time, lengths, tenant, priority).

A workload is what every loader returns and every generator produces. It is a thin, immutable
wrapper around numpy arrays sorted by arrival, so a million requests cost a few tens of MB and
operations (windowing, time scaling, merging tenants) are vectorised. It becomes simulator
`Request` objects only at the edge, with `to_requests()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from inferencegym.sim.request import Request
from inferencegym.workload.hashchain import check_chain, sim_block_hashes_many

__all__ = ["Workload"]


def _categorical(values: np.ndarray | Sequence[str] | None, n: int, name: str
                 ) -> tuple[np.ndarray, tuple[str, ...]] | None:
    if values is None:
        return None
    arr = np.asarray(values, dtype=object)
    if arr.shape != (n,):
        raise ValueError(f"Workload: column {name!r} has {arr.shape[0] if arr.ndim else 0} values, "
                         f"expected {n} (one per request)")
    names, codes = np.unique(arr.astype(str), return_inverse=True)
    return codes.astype(np.int32), tuple(str(x) for x in names)


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests as columns, sorted by arrival time.

    Build one with `Workload.from_arrays(...)` (validates and sorts) or get one from
    `load_trace`, `read_pool` or `generate`. Arrays are read-only views; every operation returns
    a new `Workload`.
    """

    arrival_s: np.ndarray
    """Arrival times in seconds (float64, non-decreasing). Usually from trace start (first = 0)."""
    prompt_tokens: np.ndarray
    """Prompt lengths in tokens (int64, >= 0; 0 only on failed trace rows)."""
    output_tokens: np.ndarray
    """Output lengths in tokens (int64, >= 0; 0 marks a failed request kept from a trace)."""
    tenant: np.ndarray
    """Tenant index per request (int64, >= 0)."""
    priority: np.ndarray
    """Priority per request (int64; 0 best effort, 1 priority)."""
    labels: dict[str, tuple[np.ndarray, tuple[str, ...]]] = field(default_factory=dict)
    """Optional categorical columns (e.g. ``model``, ``log_type``): name -> (int32 codes, names)."""
    source: str = ""
    """Where the rows came from (file name, generator description)."""
    hash_ids: np.ndarray | None = None
    """Prefix-sharing traces: per request a read-only int64 array of prefix-block hash ids (block j
    covers prompt tokens ``[j*B, (j+1)*B)``, ``B = hash_block_tokens``), as an object array; None
    when the workload has no hash chains. `to_requests` maps them onto simulator block hashes."""
    hash_block_tokens: int = 0
    """Tokens per hash id ``B`` (Mooncake 512, Bailian 16); 0 when there are no hash chains."""
    ints: dict[str, np.ndarray] = field(default_factory=dict)
    """Optional integer columns (int64), e.g. ``session``, ``turn``, ``parent`` of conversation traces."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(cls, arrival_s, prompt_tokens, output_tokens, tenant=None, priority=None, *,
                    labels: dict[str, Sequence[str] | np.ndarray] | None = None,
                    source: str = "", sort: bool = True, hash_ids=None, hash_block_tokens: int = 0,
                    ints: dict[str, np.ndarray] | None = None) -> "Workload":
        """Validate and build a workload; sorts by arrival (stable) unless ``sort=False``.

        ``hash_ids`` (one sequence of ints per request) with ``hash_block_tokens`` (tokens per id)
        give prefix-sharing hash chains; ``ints`` extra integer columns. Raises ValueError on
        length mismatches, NaN/inf times, or negative lengths.
        """
        a = np.asarray(arrival_s, dtype=np.float64).reshape(-1)
        n = a.shape[0]
        p = np.asarray(prompt_tokens, dtype=np.int64).reshape(-1)
        o = np.asarray(output_tokens, dtype=np.int64).reshape(-1)
        t = np.zeros(n, np.int64) if tenant is None else np.asarray(tenant, dtype=np.int64).reshape(-1)
        q = np.zeros(n, np.int64) if priority is None else np.asarray(priority, dtype=np.int64).reshape(-1)
        if np.isscalar(tenant) or (tenant is not None and np.ndim(tenant) == 0):
            t = np.full(n, int(tenant), np.int64)
        if np.isscalar(priority) or (priority is not None and np.ndim(priority) == 0):
            q = np.full(n, int(priority), np.int64)
        for name, arr in (("prompt_tokens", p), ("output_tokens", o), ("tenant", t), ("priority", q)):
            if arr.shape[0] != n:
                raise ValueError(f"Workload: {name} has {arr.shape[0]} values but arrival_s has {n}")
            if n and arr.min() < 0:
                i = int(np.argmin(arr))
                raise ValueError(f"Workload: {name} must be >= 0; request {i} has {int(arr[i])}")
        if n and not np.all(np.isfinite(a)):
            i = int(np.flatnonzero(~np.isfinite(a))[0])
            raise ValueError(f"Workload: arrival_s must be finite; request {i} has {a[i]}")
        cats: dict[str, tuple[np.ndarray, tuple[str, ...]]] = {}
        for name, vals in (labels or {}).items():
            if isinstance(vals, tuple) and len(vals) == 2 and isinstance(vals[1], tuple):
                codes, names = vals
                codes = np.asarray(codes, dtype=np.int32)
                if codes.shape != (n,):
                    raise ValueError(f"Workload: label {name!r} has {codes.shape} codes, expected {n}")
                cats[name] = (codes, names)
            else:
                c = _categorical(vals, n, name)
                if c is not None:
                    cats[name] = c
        hids = _hash_column(hash_ids, p, hash_block_tokens)
        extra = {}
        for name, vals in (ints or {}).items():
            extra[name] = np.asarray(vals, dtype=np.int64).reshape(-1)
            if extra[name].shape[0] != n:
                raise ValueError(f"Workload: column {name!r} has {extra[name].shape[0]} values, expected {n}")
        if sort and n > 1 and np.any(np.diff(a) < 0):
            order = np.argsort(a, kind="stable")
            a, p, o, t, q = a[order], p[order], o[order], t[order], q[order]
            cats = {k: (c[order], names) for k, (c, names) in cats.items()}
            hids = None if hids is None else hids[order]
            extra = {k: v[order] for k, v in extra.items()}
        elif not sort and n > 1 and np.any(np.diff(a) < 0):
            i = int(np.flatnonzero(np.diff(a) < 0)[0]) + 1
            raise ValueError(f"Workload: arrival_s must be non-decreasing; request {i} arrives at "
                             f"{a[i]} after {a[i - 1]} (pass sort=True to sort)")
        return cls._wrap(a, p, o, t, q, cats, source, hids, hash_block_tokens if hids is not None else 0,
                         extra)

    @classmethod
    def _wrap(cls, a, p, o, t, q, cats, source, hash_ids=None, hash_block_tokens=0,
              ints=None) -> "Workload":
        ints = ints or {}
        for arr in (a, p, o, t, q, *ints.values()):
            arr.flags.writeable = False
        for codes, _ in cats.values():
            codes.flags.writeable = False
        if hash_ids is not None:
            hash_ids.flags.writeable = False
        return cls(a, p, o, t, q, cats, source, hash_ids, int(hash_block_tokens), ints)

    @classmethod
    def empty(cls, source: str = "") -> "Workload":
        return cls.from_arrays(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), source=source)

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    def __repr__(self) -> str:
        span = self.span_s
        return (f"Workload(n={len(self)}, span_s={span:.1f}, tenants={self.num_tenants}, "
                f"source={self.source!r})")

    @property
    def span_s(self) -> float:
        """Time from the first to the last arrival (0 for fewer than two requests)."""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0

    @property
    def num_tenants(self) -> int:
        return int(self.tenant.max()) + 1 if len(self) else 0

    @property
    def failed(self) -> np.ndarray:
        """Boolean mask of failed trace rows (0 output tokens)."""
        return self.output_tokens == 0

    def label(self, name: str) -> np.ndarray:
        """The categorical column ``name`` as an array of strings."""
        if name not in self.labels:
            raise KeyError(f"Workload has no label column {name!r}; has: {sorted(self.labels) or 'none'}")
        codes, names = self.labels[name]
        return np.asarray(names, dtype=object)[codes] if names else np.full(len(codes), "", dtype=object)

    def _take(self, idx, *, arrival_s=None, source=None) -> "Workload":
        a = self.arrival_s[idx] if arrival_s is None else arrival_s
        cats = {k: (c[idx], names) for k, (c, names) in self.labels.items()}
        return Workload._wrap(np.array(a, np.float64), self.prompt_tokens[idx].copy(),
                              self.output_tokens[idx].copy(), self.tenant[idx].copy(),
                              self.priority[idx].copy(), cats,
                              self.source if source is None else source,
                              None if self.hash_ids is None else self.hash_ids[idx].copy(),
                              self.hash_block_tokens, {k: v[idx].copy() for k, v in self.ints.items()})

    # ------------------------------------------------------------------ transformations
    def window(self, start_s: float, duration_s: float, *, rebase: bool = True) -> "Workload":
        """Requests with ``start_s <= arrival_s < start_s + duration_s``.

        With ``rebase`` (default) times are shifted so the window starts at 0.
        """
        if duration_s < 0:
            raise ValueError(f"window: duration_s must be >= 0, got {duration_s}")
        lo = int(np.searchsorted(self.arrival_s, start_s, side="left"))
        hi = int(np.searchsorted(self.arrival_s, start_s + duration_s, side="left"))
        idx = np.arange(lo, hi)
        a = self.arrival_s[idx] - (start_s if rebase else 0.0)
        return self._take(idx, arrival_s=a)

    def scale_time(self, factor: float) -> "Workload":
        """Multiply every arrival time by ``factor`` (0.5 = twice the load, 2 = half the load)."""
        if not (factor > 0 and np.isfinite(factor)):
            raise ValueError(f"scale_time: factor must be a positive finite number, got {factor}")
        return self._take(slice(None), arrival_s=self.arrival_s * factor)

    def scale_rate(self, factor: float) -> "Workload":
        """Multiply the request rate by ``factor`` (compresses time by 1/factor)."""
        if not (factor > 0 and np.isfinite(factor)):
            raise ValueError(f"scale_rate: factor must be a positive finite number, got {factor}")
        return self.scale_time(1.0 / factor)

    def shift(self, offset_s: float) -> "Workload":
        """Add ``offset_s`` to every arrival time."""
        return self._take(slice(None), arrival_s=self.arrival_s + offset_s)

    def rebase(self) -> "Workload":
        """Shift so the first arrival is at 0."""
        return self.shift(-float(self.arrival_s[0])) if len(self) else self

    def drop_failed(self) -> "Workload":
        """Remove failed rows (0 output tokens)."""
        return self._take(np.flatnonzero(~self.failed))

    def with_tenant(self, tenant: int, priority: int | None = None) -> "Workload":
        """Same requests, all assigned to ``tenant`` (and ``priority`` if given)."""
        w = self._take(slice(None))
        t = np.full(len(w), int(tenant), np.int64)
        q = w.priority.copy() if priority is None else np.full(len(w), int(priority), np.int64)
        return Workload._wrap(w.arrival_s.copy(), w.prompt_tokens.copy(), w.output_tokens.copy(),
                              t, q, {k: (c.copy(), n) for k, (c, n) in w.labels.items()}, w.source,
                              w.hash_ids, w.hash_block_tokens, dict(w.ints))

    def concat(self, other: "Workload", *, gap_s: float = 0.0) -> "Workload":
        """Append ``other`` after this workload in time (other's times shifted to start
        ``gap_s`` after this one's last arrival, keeping other's offset from its own start)."""
        if len(self) == 0:
            return other
        if len(other) == 0:
            return self
        offset = float(self.arrival_s[-1]) + gap_s - float(other.arrival_s[0])
        return Workload.merge([self, other.shift(offset)], source=f"concat({self.source},{other.source})")

    @staticmethod
    def merge(parts: Iterable["Workload"], *, source: str | None = None) -> "Workload":
        """Interleave workloads by arrival time (tenants keep their own indices).

        Stable: at equal times, requests of earlier parts come first.
        """
        parts = [p for p in parts]
        if not parts:
            return Workload.empty()
        a = np.concatenate([p.arrival_s for p in parts])
        order = np.argsort(a, kind="stable")
        # union of label columns: only those present in every part are kept
        common = set(parts[0].labels)
        for p in parts[1:]:
            common &= set(p.labels)
        cats: dict[str, tuple[np.ndarray, tuple[str, ...]]] = {}
        for name in sorted(common):
            names = tuple(sorted(set().union(*(set(p.labels[name][1]) for p in parts))))
            lookup = {n: i for i, n in enumerate(names)}
            codes = np.concatenate([np.asarray([lookup[n] for n in p.labels[name][1]], np.int32)[p.labels[name][0]]
                                    if len(p) else np.zeros(0, np.int32) for p in parts])
            cats[name] = (codes[order], names)
        hids, block = _merge_hashes(parts, order)
        any_ints = sorted(set().union(*(set(p.ints) for p in parts)))  # missing in a part: -1
        return Workload._wrap(
            a[order],
            np.concatenate([p.prompt_tokens for p in parts])[order],
            np.concatenate([p.output_tokens for p in parts])[order],
            np.concatenate([p.tenant for p in parts])[order],
            np.concatenate([p.priority for p in parts])[order],
            cats,
            source if source is not None else "+".join(p.source for p in parts),
            hids, block, {k: np.concatenate([p.ints.get(k, np.full(len(p), -1, np.int64)) for p in parts])[order]
                          for k in any_ints})

    # ------------------------------------------------------------------ simulator edge
    def to_requests(self, first_id: int = 0, *, include_failed: bool = False, block_size: int = 16):
        """Simulator `Request` objects, ids ``first_id, first_id+1, ...`` in arrival order.

        Failed trace rows (0 output tokens) are skipped unless ``include_failed`` (then they raise:
        the simulator needs >= 1 output token). Prompts of 0 tokens are raised to 1 (the
        simulator needs one token to prefill); the count of such rows is in `zero_prompt_count`.
        With hash chains, each request's ``block_hashes`` are the simulator block hashes for
        ``block_size`` tokens per KV block (`inferencegym.workload.hashchain.sim_block_hashes`).
        """
        mask = ~self.failed
        if include_failed and not mask.all():
            i = int(np.flatnonzero(~mask)[0])
            raise ValueError(f"to_requests: request {i} has 0 output tokens (a failed trace row); "
                             "the simulator needs >= 1; drop failures with include_failed=False")
        idx = np.flatnonzero(mask)
        a = self.arrival_s[idx].tolist()
        p = np.maximum(self.prompt_tokens[idx], 1).tolist()
        o = self.output_tokens[idx].tolist()
        t = self.tenant[idx].tolist()
        q = self.priority[idx].tolist()
        if self.hash_ids is None:  # positional (Request's first six fields, in order: ~30 % faster
            return list(map(Request, range(first_id, first_id + len(a)), a, p, o, t, q))  # than keywords)

        B = self.hash_block_tokens
        hs = sim_block_hashes_many(self.hash_ids[idx], p, trace_block_tokens=B, sim_block_tokens=block_size)
        return [Request(req_id=first_id + k, arrival_s=a[k], prompt_tokens=p[k], output_tokens=o[k],
                        tenant=t[k], priority=q[k], block_hashes=hs[k])
                for k in range(len(a))]

    @property
    def zero_prompt_count(self) -> int:
        """Non-failed requests whose prompt is 0 tokens (raised to 1 by `to_requests`)."""
        return int(np.count_nonzero((self.prompt_tokens == 0) & ~self.failed))

    def to_dict(self) -> dict[str, np.ndarray]:
        """Columns as a dict of arrays (labels as string arrays)."""
        d = {"arrival_s": self.arrival_s, "prompt_tokens": self.prompt_tokens,
             "output_tokens": self.output_tokens, "tenant": self.tenant, "priority": self.priority}
        for k in self.labels:
            d[k] = self.label(k)
        d.update(self.ints)
        return d


def _hash_column(hash_ids, prompt: np.ndarray, block_tokens: int) -> np.ndarray | None:
    """Object array of read-only int64 arrays (one per request, checked against its prompt), or None."""
    if hash_ids is None:
        return None
    n = prompt.shape[0]
    if block_tokens < 1:
        raise ValueError(f"Workload: hash_ids need hash_block_tokens >= 1 (tokens per id), got {block_tokens}")
    if len(hash_ids) != n:
        raise ValueError(f"Workload: hash_ids has {len(hash_ids)} chains, expected {n} (one per request)")
    out = np.empty(n, dtype=object)
    for i, h in enumerate(hash_ids):
        arr = np.asarray(h).reshape(-1)
        check_chain(arr, int(prompt[i]), block_tokens, f"Workload: request {i}, hash_ids")
        arr = arr.astype(np.int64, copy=False)
        arr.flags.writeable = False
        out[i] = arr
    return out


def _merge_hashes(parts: list["Workload"], order: np.ndarray) -> tuple[np.ndarray | None, int]:
    """Hash chains of merged parts. Parts without chains (e.g. injected mega-prompts) get empty
    chains: they share nothing. Ids are one namespace: generators draw theirs at random 62-bit
    offsets so parts do not collide."""
    with_h = [p for p in parts if len(p) and p.hash_ids is not None]
    if not with_h:
        return None, 0
    blocks = {p.hash_block_tokens for p in with_h}
    if len(blocks) > 1:
        raise ValueError(f"Workload.merge: parts have hash chains of different block sizes {sorted(blocks)}")
    cols = []
    for p in parts:
        if p.hash_ids is not None:
            cols.append(p.hash_ids)
        else:
            empty = np.empty(len(p), dtype=object)
            for i in range(len(p)):
                empty[i] = np.zeros(0, np.int64)
            cols.append(empty)
    return np.concatenate(cols)[order], blocks.pop()
