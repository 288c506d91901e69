"""inference-perf's ``shared_prefix`` load, rebuilt as a simulator workload (with prefix hash chains).

inference-perf (kubernetes-sigs/inference-perf, ``inference_perf/datagen/shared_prefix_datagen.py``,
v0.4.0, Feb 2026) pre-generates ``num_groups x prompts_per_group`` prompts: each group has one
random system prompt of ``system_prompt_len`` tokens, each prompt of the group appends its own
random question of ``question_len`` tokens; request number ``d`` of a run sends prompt
``d mod N`` (``load_lazy_data``: ``i = data_index % len(prompts)``), so the same ``N`` prompts come
round again and again, and a prefix-caching server finds all but the last partial block of a
prompt it served ``N`` requests earlier (when the cache has kept it). With
``enable_multi_turn_chat`` the system prompt becomes the user session's context and is prepended
to the question when the request is sent. (v0.4.0's session code would also append each response
to that context; but the BLIS runs' mean prompt is system + question tokens, and BLIS's analysis of
their per-request data reports constant prompt lengths (inference-sim/inference-sim, branch
``training``, ``docs/plans/fix481-inference-perf-multiturn-plan.md``), so the prompts are modelled
without growth.) Lengths are
constant (no ``question_distribution``); the server generates exactly ``output_len`` tokens
(``ignore_eos``).

Its ``constant`` load type (``loadgen/load_timer.py``, ``ConstantLoadTimer``) sends
``int(rate * duration)`` requests per stage at exponential gaps normalised to sum to the stage's
duration; stages follow one another.

Here, the prompt's tokens: the system prompt and the question are scaled by ``prompt_token_scale``
(a prompt of random token ids, decoded to text and re-tokenised, comes out a few percent longer:
the measured mean over ``system + question``). Hash ids are one per 16-token block: a block inside
the system prompt carries the group's id, any later block the prompt's own, so the simulator's
chained hashes (``hashchain``) share exactly the system prompt's full blocks between the prompts
of a group, and the whole prompt between repeats of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .trace import Workload

__all__ = ["InferencePerfSharedPrefix", "generate_inference_perf", "HASH_BLOCK_TOKENS"]

HASH_BLOCK_TOKENS = 16
"""Tokens per hash id of the generated chains (vLLM's default KV block size)."""


@dataclass(frozen=True, kw_only=True)
class InferencePerfSharedPrefix:
    """One inference-perf run: ``data.shared_prefix`` settings and ``load.stages`` (constant type)."""

    num_groups: int
    """``num_unique_system_prompts`` (alias ``num_groups``): distinct system prompts."""
    prompts_per_group: int
    """``num_users_per_system_prompt`` (alias ``num_prompts_per_group``): questions per system prompt."""
    system_prompt_tokens: int
    """``system_prompt_len``: tokens of each system prompt (before ``prompt_token_scale``)."""
    question_tokens: int
    """``question_len``: tokens of each question (before ``prompt_token_scale``)."""
    output_tokens: int
    """``output_len``: tokens generated per request (``ignore_eos``: exactly this many)."""
    stages: tuple[tuple[float, float], ...]
    """``load.stages``: (rate in requests/s, duration in s), run one after the other."""
    prompt_token_scale: float = 1.0
    """Prompt tokens the server sees per generated token id (re-tokenisation of decoded random ids;
    set it to measured mean prompt / (system + question))."""
    reuse_prompts: bool = True
    """True (inference-perf): request ``d`` sends prompt ``d mod N``. False: every request gets a
    fresh question, only the system prompts are shared (a lower bound on the sharing)."""

    def __post_init__(self) -> None:
        for name in ("num_groups", "prompts_per_group", "output_tokens"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"InferencePerfSharedPrefix.{name} must be an integer >= 1, got {v!r}")
        for name in ("system_prompt_tokens", "question_tokens"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"InferencePerfSharedPrefix.{name} must be an integer >= 0, got {v!r}")
        if self.system_prompt_tokens + self.question_tokens < 1:
            raise ValueError("InferencePerfSharedPrefix: system_prompt_tokens + question_tokens must be >= 1")
        if not self.stages:
            raise ValueError("InferencePerfSharedPrefix.stages must hold at least one (rate, duration) pair")
        for i, st in enumerate(self.stages):
            if len(st) != 2 or not (st[0] > 0 and st[1] > 0):
                raise ValueError(f"InferencePerfSharedPrefix.stages[{i}] must be (rate_per_s > 0, "
                                 f"duration_s > 0), got {st!r}")
        if not self.prompt_token_scale > 0:
            raise ValueError(f"InferencePerfSharedPrefix.prompt_token_scale must be > 0, "
                             f"got {self.prompt_token_scale!r}")

    @property
    def num_prompts(self) -> int:
        """Distinct prompts ``N`` the generator cycles through."""
        return self.num_groups * self.prompts_per_group

    @property
    def prompt_tokens(self) -> int:
        """Tokens of every prompt (system prompt + question, scaled)."""
        return self.system_tokens + round(self.question_tokens * self.prompt_token_scale)

    @property
    def system_tokens(self) -> int:
        """Tokens of a system prompt as the server sees it (scaled)."""
        return round(self.system_prompt_tokens * self.prompt_token_scale)


def _arrivals(stages, rng: np.random.Generator) -> np.ndarray:
    """``ConstantLoadTimer``: ``int(rate * duration)`` exponential gaps per stage, normalised to the stage."""
    out, t0 = [], 0.0
    for rate, dur in stages:
        n = int(rate * dur)
        if n == 0:
            t0 += dur
            continue
        gaps = rng.exponential(1.0 / rate, n)
        out.append(t0 + np.cumsum(gaps * (dur / gaps.sum())))
        t0 += dur
    return np.concatenate(out) if out else np.zeros(0)


def generate_inference_perf(spec: InferencePerfSharedPrefix, rng: np.random.Generator) -> Workload:
    """The requests of one run, in arrival order, with hash chains of `HASH_BLOCK_TOKENS` tokens per id.

    Which group each prompt's system prompt belongs to is a random permutation (inference-perf
    shuffles its user sessions); ids start at a random 62-bit offset so that runs merged into one
    workload do not share blocks.
    """
    B = HASH_BLOCK_TOKENS
    arrival = _arrivals(spec.stages, rng)
    n = arrival.size
    P, S = spec.prompt_tokens, spec.system_tokens
    nb, sys_full = -(-P // B), S // B
    N = spec.num_prompts
    group = rng.permutation(N) // spec.prompts_per_group  # group of prompt i
    base = int(rng.integers(0, 1 << 62))
    sys_ids = base + np.arange(spec.num_groups * sys_full, dtype=np.int64).reshape(spec.num_groups, sys_full)
    own0 = base + spec.num_groups * sys_full

    def chain(key: int, prompt_i: int) -> np.ndarray:
        own = own0 + key * nb + np.arange(sys_full, nb, dtype=np.int64)
        return np.concatenate((sys_ids[group[prompt_i]], own))

    idx = np.arange(n) % N
    if spec.reuse_prompts:
        chains_n = [chain(i, i) for i in range(N)]
        chains = [chains_n[i] for i in idx.tolist()]
    else:
        chains = [chain(d, i) for d, i in enumerate(idx.tolist())]
    src = (f"inference-perf shared_prefix {spec.num_groups}x{spec.prompts_per_group}, system "
           f"{spec.system_prompt_tokens} + question {spec.question_tokens} tokens (x{spec.prompt_token_scale:.3f}), "
           f"output {spec.output_tokens}, {'prompts reused every ' + str(N) if spec.reuse_prompts else 'fresh questions'}")
    return Workload.from_arrays(arrival, np.full(n, P, np.int64), np.full(n, spec.output_tokens, np.int64),
                                source=src, sort=False, hash_ids=chains, hash_block_tokens=B,
                                ints={"prompt": idx.astype(np.int64)})
