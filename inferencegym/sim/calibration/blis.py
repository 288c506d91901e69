"""The BLIS vLLM-V1 H100 serving runs (``../shared/reference/engines/blis-stepml-vllm-h100-gt``):
what their load was, the measured means, and the decode-step anchors they give the ``vllm-v1`` fit.

The runs: vLLM V1 (v0.15 fork, asynchronous scheduling and prefix caching on by default), H100
SXM, ``max_num_batched_tokens`` 2048, ``max_num_seqs`` 128, ``max_model_len`` 4096; load from
inference-perf (``shared_prefix`` data, ``constant`` load type, streaming, ``ignore_eos``).

Their inference-perf settings (``WORKLOADS``) come from BLIS's own re-simulation inputs:
inference-sim/inference-sim, branch ``training``, ``testdata/roofline_goldendataset.json`` (commit
04da4f7; Apache-2.0), which carries each experiment's ``profile.yaml`` converted to a workload
spec, e.g. ``20260217-162547`` (Llama-2-7B roleplay): 10 system prompts x 5 users, system prompt 150
tokens, question 600, output 251, ``enable_multi_turn_chat`` true, one stage of 6 req/s for 1200 s.
The raw roleplay profile is also quoted in the same repository's branch ``stepml-experiments``,
``hypotheses/h-stepml/round4/phase2_idea-3-hybrid-calibration.log``; question and output lengths
and rates agree with ``workload_diagnosis.csv`` (``spec_*`` columns) for all ten runs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

RUNS_CSV = "engines/blis-stepml-vllm-h100-gt/gt_summary.csv"
TPOT_COLUMN = "tpot_derived_ms=(e2e-ttft)/(out-1)"

WORKLOADS: dict[str, dict] = {
    # inference-perf data.shared_prefix + load.stages of each workload (same for every model)
    "general": dict(num_groups=9, prompts_per_group=5, system_prompt_tokens=100, question_tokens=447,
                    output_tokens=248, stages=((8.0, 600.0), (20.0, 600.0))),
    "codegen": dict(num_groups=11, prompts_per_group=4, system_prompt_tokens=100, question_tokens=466,
                    output_tokens=247, stages=((5.0, 600.0), (10.0, 600.0))),
    "roleplay": dict(num_groups=10, prompts_per_group=5, system_prompt_tokens=150, question_tokens=600,
                     output_tokens=251, stages=((6.0, 1200.0),)),
}
MODELS = {"llama-2-7b": "llama-2-7b", "llama-2-70b": "llama-2-70b", "llama-2-70b-hf": "llama-2-70b",
          "codellama-34b": "codellama-34b"}
"""BLIS model names -> simulator presets (Mixtral-8x7B is MoE, not modelled, so its runs are skipped)."""


@dataclass(frozen=True, kw_only=True)
class BlisRun:
    """One measured run (means over its requests)."""

    experiment: str
    """BLIS experiment id, e.g. ``20260218-084319-llama-2-70b-tp4-roleplay``."""
    model: str
    """Simulator model preset."""
    tp: int
    """Tensor-parallel degree."""
    workload: str
    """``general``, ``codegen`` or ``roleplay`` (a key of `WORKLOADS`)."""
    input_tokens: float
    """Mean prompt tokens as inference-perf counted them (re-tokenised prompt text)."""
    output_tokens_counted: float
    """Mean output tokens as inference-perf counted them (re-tokenised output text)."""
    ttft_ms: float
    """Mean time to first token (client side), ms."""
    e2e_ms: float
    """Mean end-to-end latency (client side), ms."""
    tpot_derived_ms: float
    """The README's derived TPOT, ``(E2E - TTFT) / (counted output - 1)``, ms."""

    @property
    def name(self) -> str:
        """The experiment id without its timestamp."""
        return self.experiment.split("-", 2)[-1]

    @property
    def output_tokens(self) -> int:
        """Tokens the server generated: ``output_len`` (``ignore_eos``)."""
        return int(WORKLOADS[self.workload]["output_tokens"])

    @property
    def tpot_ms(self) -> float:
        """Measured time per generated token: ``(E2E - TTFT) / (output_len - 1)``, ms. Differs from
        `tpot_derived_ms` by the re-tokenisation of the output (1-2 %; 18 % for Llama-2-7B)."""
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)

    @property
    def prompt_token_scale(self) -> float:
        """Measured prompt tokens per specified token (re-tokenisation of random token ids)."""
        w = WORKLOADS[self.workload]
        return self.input_tokens / (w["system_prompt_tokens"] + w["question_tokens"])


def load_runs(ref: Path) -> list[BlisRun]:
    """The runs of models the simulator has (7 of 10), in the CSV's order."""
    path = Path(ref) / RUNS_CSV
    if not path.exists():
        raise FileNotFoundError(f"BLIS reference runs missing: {path} (expected the shared reference "
                                f"folder; set INFERENCEGYM_REFERENCE_DIR)")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [BlisRun(experiment=r["experiment"], model=MODELS[r["model"]], tp=int(r["tp"]),
                    workload=r["workload"], input_tokens=float(r["input_tokens_mean"]),
                    output_tokens_counted=float(r["output_tokens_mean"]), ttft_ms=float(r["ttft_mean_ms"]),
                    e2e_ms=float(r["e2e_mean_ms"]), tpot_derived_ms=float(r[TPOT_COLUMN]))
            for r in rows if r["model"] in MODELS]


@dataclass(frozen=True, kw_only=True)
class DecodeAnchor:
    """A decode step read off a single-stage run: by Little's law ``batch = rate x (E2E - TTFT)``
    requests are decoding at a time, at a mean context of ``prompt + output / 2`` tokens, and one
    step takes the measured time per generated token (the prompts are prefix-cache hits, so the
    steps carry almost no prefill)."""

    model: str
    tp: int
    batch: int
    """Mean number of decoding sequences (rounded)."""
    context_tokens: float
    """Mean context per sequence during decode."""
    step_s: float
    """Measured seconds per generated token."""
    experiment: str


def decode_anchors(ref: Path, *, min_tp: int = 2) -> list[DecodeAnchor]:
    """Anchors of the single-stage runs (roleplay) at tensor parallelism >= ``min_tp``."""
    out = []
    for r in load_runs(ref):
        stages = WORKLOADS[r.workload]["stages"]
        if len(stages) != 1 or r.tp < min_tp:
            continue
        rate = stages[0][0]
        out.append(DecodeAnchor(model=r.model, tp=r.tp, batch=round(rate * (r.e2e_ms - r.ttft_ms) / 1e3),
                                context_tokens=r.input_tokens + r.output_tokens / 2, step_s=r.tpot_ms / 1e3,
                                experiment=r.experiment))
    return out
