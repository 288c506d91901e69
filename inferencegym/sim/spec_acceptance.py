"""Acceptance of speculative drafts by proposer and workload, as published (not a constant).

How many draft tokens a target accepts depends on the proposer (a draft model, prompt lookup,
an EAGLE head) and on the text: n-gram lookup is strong where the answer copies the prompt
(summarisation, code editing) and weak on maths; learned heads vary less. Each entry below is one
published figure with its configuration; :func:`acceptance_alpha` turns it into the per-token
acceptance ``alpha`` of the simulator's truncated-geometric model (``ReplicaConfig.spec_acceptance``
or ``TenantSpec.spec_acceptance``): a published mean acceptance length ``tau`` (tokens emitted per
verification, accepted drafts + 1) at depth ``k`` gives the ``alpha`` with
``(1 - alpha**(k+1)) / (1 - alpha) = tau``; vLLM V0's "draft acceptance rate" (accepted draft
positions / proposed, each position counted on its own) is ``alpha`` itself.

Sources (figures checked against the sources' text where marked; ``docs/bench/fidelity.md``,
section "Speculative decoding vs load"):

- ``squeezebits``: SqueezeBits, "vLLM vs TensorRT-LLM #11: Speculative Decoding"
  (https://blog.squeezebits.com/vllm-vs-tensorrtllm-11-speculative-decoding-37301): vLLM v0.6.3,
  4 x A100-80GB, Llama-3.1-70B-Instruct TP4, draft turboderp/Qwama-0.5B-Instruct, Dynamic-Sonnet
  prompts of 1K / 2K tokens, 128 output tokens: draft acceptance rate 53.5 % / 50.9 %.
- ``specdecode-bench``: "Speculative Decoding: Performance or Illusion?" (arXiv 2601.11580,
  https://specdecode-bench.github.io): vLLM v0.10.1.1, H100, 3 draft tokens per step, mean
  acceptance length per dataset.
- ``meta-eagle``: Meta, "Efficient Speculative Decoding for Llama at Scale" (arXiv 2508.08192):
  EAGLE chain drafts, 3 tokens, MT-Bench, temperature 0: tokens per call.
"""

from __future__ import annotations

from dataclasses import dataclass

from .interpreted import mypyc_attr

__all__ = ["ACCEPTANCE", "AcceptanceFigure", "acceptance_alpha", "alpha_from_length"]


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
@dataclass(frozen=True, kw_only=True)
class AcceptanceFigure:
    """One published acceptance figure."""

    proposer: str
    """``draft`` (a draft model, named in ``draft``), ``ngram``, ``eagle`` or ``eagle3``."""
    dataset: str
    """Workload: ``sharegpt``, ``cnn_dailymail``, ``gsm8k``, ``mt_bench``, ``dynamic_sonnet_1k``..."""
    target: str
    """Target model as published."""
    draft: str = ""
    """Draft model (``proposer == "draft"``)."""
    k: int
    """Draft tokens per step of the measurement."""
    mean_length: float | None = None
    """Mean tokens emitted per verification (accepted drafts + the target's own), if published."""
    per_token_rate: float | None = None
    """vLLM V0 draft acceptance rate (accepted positions / proposed), if published."""
    source: str
    """Key of the source (module docstring)."""
    note: str = ""
    """What the figure stands in for, where it is not the exact workload."""

    def alpha(self) -> float:
        """Per-token acceptance of the truncated-geometric model."""
        if self.per_token_rate is not None:
            return float(self.per_token_rate)
        assert self.mean_length is not None
        return alpha_from_length(self.mean_length, self.k)


def alpha_from_length(mean_length: float, k: int) -> float:
    """``alpha`` in [0, 1] with ``(1 - alpha**(k+1)) / (1 - alpha) = mean_length`` (bisection)."""
    if k < 1 or not 1.0 <= mean_length <= k + 1:
        raise ValueError(f"a mean acceptance length must be in [1, k+1] with k >= 1; got "
                         f"{mean_length!r} at k={k!r}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if sum(mid ** i for i in range(k + 1)) < mean_length:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


ACCEPTANCE: tuple[AcceptanceFigure, ...] = (
    AcceptanceFigure(proposer="draft", draft="qwama-0.5b", dataset="dynamic_sonnet_1k",
                     target="llama-3.1-70b-instruct", k=4, per_token_rate=0.535, source="squeezebits",
                     note="stands in for ShareGPT: the same draft/target pair and vLLM generation; "
                          "k not restated here (the rate is per position, so k does not enter)"),
    AcceptanceFigure(proposer="draft", draft="qwama-0.5b", dataset="dynamic_sonnet_2k",
                     target="llama-3.1-70b-instruct", k=4, per_token_rate=0.509, source="squeezebits"),
    AcceptanceFigure(proposer="ngram", dataset="cnn_dailymail", target="specdecode-bench targets", k=3,
                     mean_length=2.33, source="specdecode-bench"),
    AcceptanceFigure(proposer="ngram", dataset="gsm8k", target="specdecode-bench targets", k=3,
                     mean_length=1.41, source="specdecode-bench"),
    AcceptanceFigure(proposer="eagle3", dataset="cnn_dailymail", target="specdecode-bench targets", k=3,
                     mean_length=3.08, source="specdecode-bench"),
    AcceptanceFigure(proposer="eagle3", dataset="gsm8k", target="specdecode-bench targets", k=3,
                     mean_length=3.02, source="specdecode-bench"),
    AcceptanceFigure(proposer="eagle", dataset="sharegpt", target="llama-3-70b-instruct", k=3,
                     mean_length=2.29, source="specdecode-bench",
                     note="chain drafts; the paper does not say EAGLE or EAGLE-3 for this figure"),
    AcceptanceFigure(proposer="eagle", dataset="mt_bench", target="llama-3.1-8b-instruct", k=3,
                     mean_length=2.78, source="meta-eagle"),
    AcceptanceFigure(proposer="eagle", dataset="mt_bench", target="llama-3.3-70b-instruct", k=3,
                     mean_length=2.94, source="meta-eagle"),
)
"""Published acceptance figures (see the module docstring for the sources)."""

_STAND_IN = {("draft", "sharegpt"): "dynamic_sonnet_1k"}
"""Workloads without a figure of their own and the figure that stands in for them."""


def acceptance_alpha(proposer: str, dataset: str, target: str | None = None) -> float:
    """Per-token acceptance ``alpha`` of ``proposer`` on ``dataset`` (the first published figure,
    or the one for ``target`` when given). ValueError naming the known pairs otherwise."""
    ds = _STAND_IN.get((proposer, dataset), dataset)
    for f in ACCEPTANCE:
        if f.proposer == proposer and f.dataset == ds and (target is None or f.target == target):
            return f.alpha()
    known = ", ".join(sorted({f"{f.proposer}/{f.dataset}" for f in ACCEPTANCE}))
    raise ValueError(f"no published acceptance for proposer {proposer!r} on {dataset!r}"
                     f"{'' if target is None else f' with target {target!r}'}; known: {known}")
