"""Prefix-sharing generators: shared system prompts, multi-turn conversations, agent loops.

One engine, `PrefixWorkloadSpec`, draws *sessions*; the three kinds are parameter sets of it:

- ``shared_prefix`` (system prompts / templates / documents): one turn per session; the prompt is
  one of ``num_prefixes`` shared prefixes (popularity Zipf(``zipf_s``), each prefix's length drawn
  once from ``prefix_tokens``) followed by a unique message; a share ``unique_share`` of the
  sessions has no shared prefix (prompt from ``unique_prompt_tokens``);
- ``multiturn`` (conversations): several turns; turn ``i``'s prompt is the whole previous context
  (previous prompt, plus its output when ``context_includes_output``) plus a new message, sent
  ``think_time_s`` after the previous turn;
- ``agent`` (agent loops): a long shared context (a prefix of the pool), then many short turns
  with short think times.

Hash chains come out at ``block_tokens`` tokens per id: a shared prefix owns a fixed id range (its
full blocks), every other block gets a fresh id, and turn ``i`` repeats the ids of turn ``i-1``'s
full blocks. Ids start at a random 62-bit offset drawn from the Generator, so workloads generated
separately (tenants) do not collide when merged. Everything is drawn from one numpy Generator: the
same spec, duration and seed give identical workloads. Lengths are quantile tables on `LEVELS`
(inverse-CDF sampling with linear interpolation), fitted by `inferencegym.workload.prefix_fit`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from inferencegym.sim import portable_math

from inferencegym.workload.fit import atomic_write_bytes

from .jsonio import read_json
from .trace import Workload

__all__ = ["PrefixWorkloadSpec", "LEVELS", "generate_prefix_workload", "generate_prefix_mix",
           "default_prefix_spec", "PREFIX_FITS"]

LEVELS: tuple[float, ...] = tuple(np.round(np.concatenate(
    ([0.0, 0.01, 0.025], np.linspace(0.05, 0.95, 19), [0.975, 0.99, 1.0])), 4).tolist())
"""Probability levels of every quantile table of a spec."""
FITS_DIR = Path(__file__).resolve().parent.parent / "data" / "fits"
PREFIX_FITS = {"mooncake_shared_prefix": "mooncake_shared_prefix.json",
               "mooncake_multiturn": "mooncake_multiturn.json",
               "mooncake_agent": "mooncake_agent.json"}
SCHEMA = "inferencegym.workload.prefix_spec/1"


@dataclass(frozen=True, kw_only=True)
class PrefixWorkloadSpec:
    """Parameters of a prefix-sharing session generator (quantile tables are on `LEVELS`)."""

    kind: str
    """``shared_prefix``, ``multiturn`` or ``agent`` (a label; the engine is the same)."""
    session_rate_per_s: float
    """Poisson rate of new sessions (sessions/s); requests/s = this x mean turns."""
    num_prefixes: int
    """Shared prefixes in the pool (system prompts, documents, agent contexts); 0 = none."""
    zipf_s: float
    """Popularity of the prefixes: P(prefix of rank r) ~ r^-zipf_s."""
    unique_share: float
    """Share of sessions that use no shared prefix (0..1)."""
    prefix_tokens: tuple[float, ...]
    """Quantiles of a shared prefix's length (tokens), one draw per prefix."""
    first_message_tokens: tuple[float, ...]
    """Quantiles of the message after the shared prefix in a session's first turn (tokens)."""
    unique_prompt_tokens: tuple[float, ...]
    """Quantiles of the first prompt of a session without a shared prefix (tokens)."""
    turn_message_tokens: tuple[float, ...]
    """Quantiles of the new message of every later turn (tokens)."""
    output_tokens: tuple[float, ...]
    """Quantiles of output lengths (tokens)."""
    turns: tuple[float, ...]
    """Quantiles of the number of turns per session (rounded, >= 1)."""
    think_time_s: tuple[float, ...]
    """Quantiles of the time from one turn's arrival to the next one's (seconds)."""
    turns_prompt_rho: float = 0.0
    """Gaussian-copula correlation between a session's turns and its first prompt (a session
    without a shared prefix: its prompt; with one: its first message), e.g. long documents get
    more follow-up questions. Fitted as ``2 sin(pi rho_S / 6)`` from the Spearman ``rho_S``."""
    context_includes_output: bool = True
    """Turn i's prompt contains turn i-1's output (a conversation); False: only the prompt."""
    block_tokens: int = 16
    """Tokens per generated hash id."""
    max_prompt_tokens: int = 1 << 20
    """A session ends early when its next prompt would exceed this (context limit)."""
    source: str = ""
    """What the figures were fitted to."""

    def __post_init__(self) -> None:
        for name in ("prefix_tokens", "first_message_tokens", "unique_prompt_tokens", "turn_message_tokens",
                     "output_tokens", "turns", "think_time_s"):
            v = getattr(self, name)
            if len(v) != len(LEVELS) or any(b < a for a, b in zip(v, v[1:])) or min(v) < 0:
                raise ValueError(f"PrefixWorkloadSpec.{name}: expected {len(LEVELS)} non-decreasing "
                                 f"quantiles >= 0 (on LEVELS), got {len(v)} values")
        if not self.session_rate_per_s > 0:
            raise ValueError(f"session_rate_per_s must be > 0, got {self.session_rate_per_s}")
        if self.num_prefixes < 0 or not 0.0 <= self.unique_share <= 1.0 or self.zipf_s < 0:
            raise ValueError("num_prefixes >= 0, 0 <= unique_share <= 1 and zipf_s >= 0 are required")
        if self.num_prefixes == 0 and self.unique_share < 1.0:
            raise ValueError("a spec without prefixes (num_prefixes=0) needs unique_share=1")
        if not -1.0 < self.turns_prompt_rho < 1.0:
            raise ValueError(f"turns_prompt_rho must be in (-1, 1), got {self.turns_prompt_rho}")
        if self.block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {self.block_tokens}")

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict:
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        return {"schema": SCHEMA, "levels": list(LEVELS), **d}

    @classmethod
    def from_dict(cls, d: dict) -> "PrefixWorkloadSpec":
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a prefix generator spec (schema {d.get('schema')!r}, expected {SCHEMA!r})")
        if tuple(d.get("levels", LEVELS)) != LEVELS:
            raise ValueError("prefix spec quantile levels differ from LEVELS")
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k not in ("schema", "levels")}
        return cls(**kw)

    def save(self, path: str | Path) -> None:
        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=1) + "\n").encode())

    @classmethod
    def load(cls, path: str | Path) -> "PrefixWorkloadSpec":
        d = read_json(path, "prefix workload spec")
        try:
            return cls.from_dict(d)
        except (TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"{path}: not a prefix workload spec ({exc})") from None

    def with_rate(self, requests_per_s: float) -> "PrefixWorkloadSpec":
        """The same spec at ``requests_per_s`` (sessions/s scaled by the median turns)."""
        return replace(self, session_rate_per_s=requests_per_s / max(self.mean_turns(), 1.0))

    def mean_turns(self) -> float:
        return float(np.mean(np.maximum(np.rint(_draw_table(self.turns, np.linspace(0, 1, 2001))), 1)))


def default_prefix_spec(name: str) -> PrefixWorkloadSpec:
    """A shipped spec: ``mooncake_shared_prefix``, ``mooncake_multiturn`` or ``mooncake_agent``."""
    if name not in PREFIX_FITS:
        raise ValueError(f"unknown prefix generator {name!r}; shipped: {', '.join(PREFIX_FITS)}")
    return PrefixWorkloadSpec.load(FITS_DIR / PREFIX_FITS[name])


def _draw_table(table, u: np.ndarray) -> np.ndarray:
    return np.interp(u, LEVELS, table)


def _draw(table, n: int, rng: np.random.Generator, lo: int = 1) -> np.ndarray:
    return np.maximum(np.rint(_draw_table(table, rng.random(n))), lo).astype(np.int64)


def generate_prefix_workload(spec: PrefixWorkloadSpec, duration_s: float, rng: np.random.Generator, *,
                             tenant: int = 0, priority: int = 0) -> Workload:
    """Sessions arriving in ``[0, duration_s)``; turns after ``duration_s`` are dropped."""
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    B = spec.block_tokens
    next_id = int(rng.integers(0, 1 << 62))
    K = spec.num_prefixes
    plen = _draw(spec.prefix_tokens, K, rng) if K else np.zeros(0, np.int64)
    pblocks = plen // B
    pbase = next_id + np.concatenate(([0], np.cumsum(pblocks)[:-1])) if K else np.zeros(0, np.int64)
    next_id += int(pblocks.sum())
    n_s = int(rng.poisson(spec.session_rate_per_s * duration_s))
    start = np.sort(rng.uniform(0.0, duration_s, n_s))
    unique = rng.random(n_s) < spec.unique_share
    if K:
        w = portable_math.power(np.arange(1, K + 1, dtype=float), -spec.zipf_s)
        which = rng.choice(K, size=n_s, p=w / w.sum())
    else:
        which = np.zeros(n_s, np.int64)
    from scipy.special import ndtr

    zt = rng.standard_normal(n_s)
    rho = spec.turns_prompt_rho
    up = ndtr(rho * zt + np.sqrt(1.0 - rho * rho) * rng.standard_normal(n_s))
    turns = np.maximum(np.rint(_draw_table(spec.turns, ndtr(zt))), 1).astype(np.int64)
    first_msg = np.maximum(np.rint(_draw_table(spec.first_message_tokens, up)), 1).astype(np.int64)
    uniq_prompt = np.maximum(np.rint(_draw_table(spec.unique_prompt_tokens, up)), 1).astype(np.int64)
    total = int(turns.sum())
    msgs = _draw(spec.turn_message_tokens, total, rng)
    outs = _draw(spec.output_tokens, total, rng)
    thinks = _draw_table(spec.think_time_s, rng.random(total))
    arr, prm, out, chains, sess, turn = [], [], [], [], [], []
    k = 0
    for s in range(n_s):
        t = float(start[s])
        if unique[s]:
            prompt, ids = int(uniq_prompt[s]), np.zeros(0, np.int64)
        else:
            p = int(which[s])
            prompt = int(plen[p] + first_msg[s])
            ids = pbase[p] + np.arange(pblocks[p], dtype=np.int64)
        for i in range(int(turns[s])):
            if i:
                t += float(thinks[k])
                prompt += int(msgs[k]) + (int(outs[k - 1]) if spec.context_includes_output else 0)
            if t >= duration_s or prompt > spec.max_prompt_tokens:
                k += int(turns[s]) - i
                break
            need = -(-prompt // B)
            keep = min(ids.size, need)
            fresh = need - keep
            ids = np.concatenate((ids[:keep], np.arange(next_id, next_id + fresh, dtype=np.int64)))
            next_id += fresh
            arr.append(t)
            prm.append(prompt)
            out.append(int(outs[k]))
            chains.append(ids)
            sess.append(s)
            turn.append(i + 1)
            ids = ids[: prompt // B]  # the next turn keeps only this prompt's full blocks
            k += 1
    return Workload.from_arrays(
        np.asarray(arr, float), np.asarray(prm, np.int64), np.asarray(out, np.int64), tenant, priority,
        source=f"prefix generator {spec.kind} ({spec.source})", hash_ids=chains, hash_block_tokens=B,
        ints={"session": np.asarray(sess, np.int64) + (tenant << 40), "turn": np.asarray(turn, np.int64)})


def generate_prefix_mix(specs: list[PrefixWorkloadSpec], duration_s: float, rng: np.random.Generator
                        ) -> Workload:
    """One tenant per spec (tenant i = specs[i], its own prefixes), each from its own child Generator."""
    children = rng.spawn(len(specs))
    return Workload.merge([generate_prefix_workload(s, duration_s, c, tenant=i)
                           for i, (s, c) in enumerate(zip(specs, children))])
