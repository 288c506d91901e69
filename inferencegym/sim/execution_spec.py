"""Speculative decoding's costs: the proposers and what verification adds to a step.

One job: the price of a speculative step of depth k besides the target's pass. By proposer
(``ExecutionModel.from_preset(draft_model=...)``):

* a draft model: k sequential draft decode passes at batch B, at tensor parallel 1 on one GPU of
  the replica, with the draft's own launch overhead (per layer and per sequence);
* ``"eagle"``: k passes of a one-layer head of the target's width with the target's LM head, at
  the target's tensor parallel degree (EAGLE, Li et al. 2024);
* ``"ngram"``: prompt lookup on the CPU, no GPU work: one pass over the sequences at the engine's
  n-gram rate (``EngineParams.ngram_per_seq_s``, else its per-sequence rate).

Verification is one target pass of k+1 tokens per sequence: one sequence with k+1 queries (V1), or
by batch expansion into k+1 single-query sequences (vLLM V0 of 2024,
``EngineParams.spec_batch_expansion``; the target pass counts ``B*(k+1)`` sequences), plus the
engine's speculative bookkeeping per sequence (``EngineParams.spec_per_seq_s``). The target pass
itself is ``ExecutionModel``'s; this module gives the proposer's passes and the bookkeeping.

:class:`SpeculativeCosts` is a base of :class:`~inferencegym.sim.execution.ExecutionModel`. State
contract: the subclass sets ``engine``, ``engine_overhead``, ``draft`` and ``_slow`` (the engine's
kernel slow-down per token) and calls :meth:`SpeculativeCosts._setup_speculation` with the draft's
execution model (built from :func:`draft_shape`), which sets ``spec_method``, ``_spec_expand`` and
``_draft_model``.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from inferencegym.sim.execution_params import EngineParams
from inferencegym.sim.presets import ModelPreset, get_model

SPEC_PROPOSERS = ("ngram", "eagle")
"""Draft-model-free proposers ``from_preset(draft_model=...)`` accepts besides model preset names."""


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens produced by one speculative step of depth ``k`` at acceptance ``alpha``.

    ``(1 - alpha**(k+1)) / (1 - alpha)`` (Leviathan et al., 2023), = k+1 at alpha = 1, = 1 at k = 0.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance alpha must be in [0, 1], got {alpha!r}")
    if k < 0:
        raise ValueError(f"speculation depth k must be >= 0, got {k!r}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def resolve_proposer(model: ModelPreset, draft_model: str | None) -> ModelPreset | str | None:
    """The proposer a ``draft_model`` name means for ``model``: a draft preset, a name of
    :data:`SPEC_PROPOSERS`, or None (``"default"``: the model's preset draft)."""
    if draft_model == "default":
        draft_model = model.draft_model
    if draft_model in SPEC_PROPOSERS:
        return draft_model
    try:
        return get_model(draft_model) if draft_model else None
    except ValueError as e:
        raise ValueError(f"draft_model must be 'default', a draft model preset, "
                         f"{' or '.join(repr(p) for p in SPEC_PROPOSERS)} or None; {e}") from None


def draft_shape(model: ModelPreset, draft: ModelPreset | str | None,
                tensor_parallel: int) -> tuple[ModelPreset, int] | None:
    """What runs the proposals on the GPU: ``(model preset, tensor parallel)``, or None (n-gram,
    no speculation). EAGLE: one decoder layer of the target's shapes with its LM head, target TP;
    a draft model: itself at TP 1."""
    if draft == "eagle":
        head = dataclasses.replace(model, name=f"{model.name}-eagle-head", num_layers=1,
                                   draft_model=None, num_experts=0, experts_per_token=0,
                                   moe_ffn_size=0)
        return head, tensor_parallel
    if isinstance(draft, ModelPreset):
        return draft, 1
    return None


class DraftModel(Protocol):
    """What the proposer's passes need of the draft's execution model."""

    _layers: int

    def decode_coeffs(self, decode_batch: int, speculation_depth: int = 0) -> tuple[float, float]: ...


class SpeculativeCosts:
    """The proposer's passes and the speculative bookkeeping of one step."""

    engine: EngineParams
    engine_overhead: bool
    draft: ModelPreset | str | None
    _slow: float

    def _setup_speculation(self, draft_model: DraftModel | None) -> None:
        self._draft_model = draft_model
        self.spec_method = ("draft" if isinstance(self.draft, ModelPreset) else self.draft)
        """Speculative proposer: ``draft`` (a draft model), ``eagle``, ``ngram`` or None (off)."""
        self._spec_expand = bool(self.engine_overhead and self.engine.spec_batch_expansion)
        self._draft_cache: dict[int, tuple[float, float]] = {}
        """:meth:`_draft_pass_coeffs` per batch size (a pure function of the model, as the decode
        coefficients): every speculative iteration asks for it."""

    def _spec_cpu_s(self, B: int) -> float:
        """The engine's speculative bookkeeping for ``B`` sequences (CPU, engine profile)."""
        return self.engine.spec_per_seq_s * B

    def _draft_pass_coeffs(self, B: int) -> tuple[float, float]:
        """One draft decode pass at batch B: (a, b) in the draft's total context, including the
        draft's own launch overhead (per layer and per sequence) and its layers' GPU time between
        graph-replayed kernels (``gpu_per_layer_s``); the fixed per-iteration cost, CPU-side
        scheduling and input preparation, is paid once per engine step."""
        c = self._draft_cache.get(B)
        if c is not None:
            return c
        e = self.engine
        if self.spec_method == "ngram":  # CPU prompt lookup, per sequence
            if not self.engine_overhead:
                c = (0.0, 0.0)
            else:
                c = ((e.per_seq_s if e.ngram_per_seq_s is None else e.ngram_per_seq_s) * B, 0.0)
        else:
            dm = self._draft_model
            assert dm is not None
            a, b = dm.decode_coeffs(B, 0)
            if self.engine_overhead:
                f = 1.0 + self._slow * B
                a = f * a + dm._layers * (e.per_layer_s + e.gpu_per_layer_s) + e.per_seq_s * B
                b = f * b
            c = (a, b)
        self._draft_cache[B] = c
        return c

    def _add_draft_coeffs(self, a: float, b: float, B: int, k: int) -> tuple[float, float]:
        """``(a, b)`` of a step's target pass plus the proposer's work at depth ``k`` and batch B
        (k draft passes; n-gram: one lookup pass)."""
        da, db = self._draft_pass_coeffs(B)
        if self.spec_method == "ngram":  # one lookup pass over the sequences, not k
            return a + da, b
        return a + k * da, b + k * db

    def _draft_time_s(self, B: int, k: int, context_tokens: float) -> float:
        """The proposer's time in a step of depth ``k``: B sequences, ``context_tokens`` in all."""
        if self.spec_method is None:
            raise ValueError("speculation_depth > 0 needs a draft model")
        da, db = self._draft_pass_coeffs(B)
        passes = 1 if self.spec_method == "ngram" else k
        return passes * (da + db * context_tokens)
