"""Fit one GPU's kernel parameters on a GPU profile file (per-op and whole-model kernel times).

The file schema is the shared H200 file's (``reference.gpu_profile``; written by
``benchmarks/gpu_profile.py``). Stages, each a soft-L1 least squares on log(predicted/measured):

1. GEMMs (compute and memory efficiency, roofline exponent, floor) on the ``attn_pre_proj``,
   ``attn_post_proj``, ``mlp_up_proj`` and ``mlp_down_proj`` rows;
2. attention on the ``attn_decode`` and ``attn_prefill`` rows (``fit.fit_attention``);
3. elementwise ops: the file has no per-op rows for them, and the profiler runs them as unfused
   PyTorch ops (RMSNorm, RoPE and SiLU*mul are several kernels each) where serving engines run
   fused kernels. So the GPU's preset keeps the elementwise efficiencies of ``base`` (a GPU of the
   same family profiled on vLLM's fused kernels, e.g. H100 for H200: efficiencies are fractions
   of each GPU's own bandwidth), and a separate *profile* elementwise set (one common scale of
   ``base``'s efficiencies and the floor) is fitted on the whole-model rows (``model_decode`` and
   ``model_prefill`` of ``FIT_PROMPT_RANGE`` tokens) with GEMMs and attention fixed: it reproduces
   the profiler's implementation and is used only to check the whole-model rows. Every other
   whole-model row (shorter or longer prompts, ``model_prefill_cached``) is held out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from inferencegym.sim.calibration import reference as R
from inferencegym.sim.calibration.stages import (
    _kernel_with,
    _ls,
    build_model,
    fit_attention,
    fit_gemm,
)
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_params import KernelParams

FIT_PROMPT_RANGE = (512, 8192)
"""Whole-model prefill rows used by the elementwise stage (longer ones test extrapolation)."""
WHOLE_OPS = ("model_prefill", "model_prefill_cached", "model_decode")


def whole_model_time_s(m: ExecutionModel, op: str, prompt_tokens: int, batch: int, context: int) -> float:
    """Kernel time of one whole-model row (no engine overhead when ``m`` is kernel-only)."""
    if op == "model_prefill":
        return m.prefill_time_s(prompt_tokens)
    if op == "model_prefill_cached":
        return m.iteration_time_s([(prompt_tokens, context)], 0, 0, 0)
    if op == "model_decode":
        return m.decode_step_time_s(batch, context)
    raise ValueError(f"not a whole-model op: {op!r}; valid: {', '.join(WHOLE_OPS)}")


def is_fit_whole_row(op: str, prompt_tokens: int) -> bool:
    """True for the whole-model rows the elementwise stage fits on (the rest are held out)."""
    lo, hi = FIT_PROMPT_RANGE
    return op == "model_decode" or (op == "model_prefill" and lo <= prompt_tokens <= hi)


def _gemm_frame(rows: pd.DataFrame, gpu: str) -> pd.DataFrame:
    g = rows[rows["op"].isin(R.GEMM_OPS)]
    return pd.DataFrame({"gpu": gpu, "model": g["model"], "tp": g["tp"], "n": g["n_tokens"],
                         "op": g["op"], "measured_s": g["measured_s"]})


ELEM_FIELDS = ("norm_eff_mem", "rope_eff_mem", "act_eff_mem", "add_eff_mem", "elem_floor_s")


def with_profile_elementwise(kernel: KernelParams, profile_elementwise: dict) -> KernelParams:
    """``kernel`` with the profiler's (unfused) elementwise parameters, to predict its rows."""
    return _kernel_with(kernel, **{k: profile_elementwise[k] for k in ELEM_FIELDS})


def fit_elementwise_whole(rows: pd.DataFrame, gpu: str, base: KernelParams) -> KernelParams:
    """Common scale of ``base``'s elementwise efficiencies and the elementwise floor, fitted on
    the whole-model rows selected by :func:`is_fit_whole_row` (the profiler's implementation)."""
    w = rows[[is_fit_whole_row(o, p) for o, p in zip(rows["op"], rows["prompt_tokens"])]]
    if w.empty:
        raise ValueError("the profile has no model_decode or model_prefill rows of "
                         f"{FIT_PROMPT_RANGE[0]}-{FIT_PROMPT_RANGE[1]} tokens to fit elementwise ops on")
    names = ("norm_eff_mem", "rope_eff_mem", "act_eff_mem", "add_eff_mem")
    eff0 = {n: getattr(base, n) for n in names}
    meas = w["measured_s"].to_numpy(float)

    def make(x):
        s = math.exp(x[0])
        return _kernel_with(base, elem_floor_s=float(math.exp(x[1])),
                            **{n: float(v * s) for n, v in eff0.items()})

    def res(x):
        k = make(x)
        cache: dict = {}
        pred = []
        for r in w.itertuples(index=False):
            key = (r.model, r.tp)
            if key not in cache:
                cache[key] = build_model(r.model, gpu, int(r.tp), k)
            pred.append(whole_model_time_s(cache[key], r.op, r.prompt_tokens, r.batch, r.context))
        return np.log(np.array(pred) / meas)

    r = _ls(res, np.log([1.0, base.elem_floor_s]), np.log([0.05, 1e-7]), np.log([5.0, 1e-4]))
    return make(r.x)


def fit_gpu_profile(rows: pd.DataFrame, gpu: str, base: KernelParams) -> tuple[KernelParams, dict]:
    """``(kernel, profile_elementwise)`` of ``gpu`` fitted on a profile's rows. ``base`` supplies
    the network and the (fused, serving-engine) elementwise efficiencies; use a GPU of the same
    family. ``profile_elementwise`` holds the profiler's unfused elementwise parameters."""
    k = fit_gemm(_gemm_frame(rows, gpu), gpu, base)
    k = fit_attention_rows(rows, gpu, k)
    pe = fit_elementwise_whole(rows, gpu, k)
    return k, {f: float(getattr(pe, f)) for f in ELEM_FIELDS}


def fit_attention_rows(rows: pd.DataFrame, gpu: str, base: KernelParams) -> KernelParams:
    """Attention stage on a profile's ``attn_decode`` / ``attn_prefill`` rows (one model/TP)."""
    att = rows[rows["op"].isin(("attn_decode", "attn_prefill"))]
    combos = att[["model", "tp"]].drop_duplicates()
    if len(combos) != 1:
        raise ValueError(f"attention rows must come from one model and TP degree, got "
                         f"{combos.to_dict('records')}")
    model, tp = combos.iloc[0]["model"], int(combos.iloc[0]["tp"])
    dec = att[att["op"] == "attn_decode"][["batch", "context", "measured_s"]]
    pf = att[att["op"] == "attn_prefill"][["chunk", "context", "measured_s"]]
    if dec.empty or pf.empty:
        raise ValueError("the profile needs both attn_decode and attn_prefill rows")
    return fit_attention(dec, pf, base, gpu=gpu, model=model, tp=tp)
