"""The fitting stages of the calibration (each a soft-L1 least squares on log(predicted/measured)).

Used by ``fit.fit_all`` (the whole calibration) and ``gpu_fit`` (one GPU from a profile file):
all-reduce per TP degree, GEMMs, elementwise ops, attention, and the ``vllm-2023`` engine overhead
on SplitwiseSim's end-to-end times. See ``fit`` for the order and the data of each stage.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from inferencegym.sim.calibration import reference as R
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_params import EngineParams, KernelParams
from inferencegym.sim.presets import get_gpu, get_model, get_quantization

# Held out of every fit and reported separately (generalisation to unseen model/GPU/TP combos).
HELDOUT_VIDUR: tuple[tuple[str, str, int | None], ...] = (
    ("a100-80gb", "llama-3-8b", None),  # a whole model (all TP degrees) on A100
    ("h100-80gb", "llama-2-7b", 8),  # a TP degree on H100
)
HELDOUT_SPLITWISE: tuple[tuple[str, str, int], ...] = (
    ("llama-2-70b", "a100-80gb", 8),  # a TP degree (the "TP8 is no faster than TP4" point)
    ("bloom-176b", "h100-80gb", 8),  # another GPU
)
def is_heldout_vidur(gpu: str, model: str, tp: int) -> bool:
    return any(g == gpu and m == model and (t is None or t == tp) for g, m, t in HELDOUT_VIDUR)


def is_heldout_splitwise(model: str, gpu: str, tp: int) -> bool:
    return (model, gpu, tp) in HELDOUT_SPLITWISE


def build_model(model: str, gpu: str, tp: int, kernel: KernelParams, engine: EngineParams | None = None,
                *, quantization: str = "fp16") -> ExecutionModel:
    """A model with explicit parameters (no memory check: Vidur profiles 70B kernels at TP 1)."""
    return ExecutionModel(model=get_model(model), gpu=get_gpu(gpu), tensor_parallel=tp,
                          quantization=get_quantization(quantization), kernel=kernel,
                          engine=engine or EngineParams(), draft=None,
                          engine_overhead=engine is not None, check_memory=False)


def _ls(fun, x0, lb=-np.inf, ub=np.inf):
    return least_squares(fun, x0, bounds=(lb, ub), loss="soft_l1", f_scale=0.05, x_scale="jac",
                         max_nfev=400)


# ----------------------------------------------------------------------------- 1. network
def fit_network(ar: pd.DataFrame) -> dict:
    out = {}
    for fam, d in ar.groupby("profile"):
        lat, bw = {}, {}
        for tp, g in d.groupby("tp"):
            size = g["bytes"].to_numpy(float)
            meas = g["measured_s"].to_numpy(float)

            def res(x, size=size, meas=meas):
                return np.log((math.exp(x[0]) + size / math.exp(x[1])) / meas)

            r = _ls(res, np.array([math.log(2e-5), math.log(1e11)]))
            lat[str(int(tp))] = float(math.exp(r.x[0]))
            bw[str(int(tp))] = float(math.exp(r.x[1]) / 1e9)
        out[fam] = {"latency_s": lat, "gbytes_per_s": bw}
    return out


def _kernel_with(base: KernelParams, **kw) -> KernelParams:
    d = base.to_dict()
    d.update(kw)
    return KernelParams.from_dict(d)


# ----------------------------------------------------------------------------- 2-3. ops
def _op_groups(ops: pd.DataFrame, gpu: str, op_names) -> list:
    d = ops[(ops["gpu"] == gpu) & ops["op"].isin(op_names)]
    groups = []
    for (model, tp), g in d.groupby(["model", "tp"]):
        if is_heldout_vidur(gpu, model, int(tp)):
            continue
        per_op = {op: (gg["n"].to_numpy(float), gg["measured_s"].to_numpy(float))
                  for op, gg in g.groupby("op")}
        groups.append((model, int(tp), per_op))
    return groups


def _op_residuals(kernel: KernelParams, gpu: str, groups) -> np.ndarray:
    """log(pred/measured) per row, weighted so that every (model, TP) profile counts equally
    (the Llama-3 profiles have 7x more token counts than the Llama-2 ones)."""
    res = []
    for model, tp, per_op in groups:
        m = build_model(model, gpu, tp, kernel)
        rows = sum(len(n) for n, _ in per_op.values())
        w = math.sqrt(1000.0 / rows)
        for op, (n, meas) in per_op.items():
            pred = m.layer_op_times_s(n)[op]
            res.append(w * np.log(pred / meas))
    return np.concatenate(res)


def fit_gemm(ops: pd.DataFrame, gpu: str, base: KernelParams) -> KernelParams:
    groups = _op_groups(ops, gpu, R.GEMM_OPS)

    def make(x):
        return _kernel_with(base, gemm_eff_compute=float(math.exp(x[0])),
                            gemm_eff_mem=float(math.exp(x[1])), gemm_p=float(1.0 + math.exp(x[2])),
                            gemm_floor_s=float(math.exp(x[3])))

    x0 = np.log([0.7, 0.75, 1.0, 5e-6])
    lb = np.log([0.05, 0.05, 0.05, 1e-7])
    ub = np.log([1.0, 1.0, 30.0, 1e-4])
    r = _ls(lambda x: _op_residuals(make(x), gpu, groups), x0, lb, ub)
    return make(r.x)


def fit_elementwise(ops: pd.DataFrame, gpu: str, base: KernelParams) -> KernelParams:
    groups = _op_groups(ops, gpu, R.ELEM_OPS)

    def make(x):
        e = np.exp(x)
        return _kernel_with(base, norm_eff_mem=float(e[0]), rope_eff_mem=float(e[1]),
                            act_eff_mem=float(e[2]), add_eff_mem=float(e[3]),
                            elem_floor_s=float(e[4]))

    x0 = np.log([0.4, 0.6, 0.7, 0.8, 4e-6])
    lb = np.log([0.02, 0.02, 0.02, 0.02, 1e-7])
    ub = np.log([1.5, 1.5, 1.5, 1.5, 1e-4])
    r = _ls(lambda x: _op_residuals(make(x), gpu, groups), x0, lb, ub)
    return make(r.x)


# ----------------------------------------------------------------------------- 4. attention
def fit_attention(dec: pd.DataFrame, pf: pd.DataFrame, base: KernelParams, *, gpu: str = "a100-80gb",
                  model: str = "llama-2-7b", tp: int = 1) -> KernelParams:
    """Decode (floor, per sequence and KV head, KV bandwidth) then prefill (compute efficiency of
    the causal triangle and of the cached-context rectangle, bandwidth, floor, per token) on one
    GPU's attention samples: ``dec`` (batch, context, measured_s), ``pf`` (chunk, context, ...)."""
    B = dec["batch"].to_numpy(float)
    C = dec["context"].to_numpy(float)
    md = dec["measured_s"].to_numpy(float)

    def make_dec(x):
        e = np.exp(x)
        return _kernel_with(base, attn_decode_floor_s=float(e[0]),
                            attn_decode_per_seq_kv_head_s=float(e[1]), attn_decode_eff_mem=float(e[2]))

    def res_dec(x):
        m = build_model(model, gpu, tp, make_dec(x))
        return np.log(m.attention_decode_layer_s(B, B * C) / md)

    r = _ls(res_dec, np.log([5e-6, 3e-8, 0.85]), np.log([1e-8, 1e-12, 0.05]), np.log([1e-4, 1e-5, 1.5]))
    k = make_dec(r.x)
    chunks = list(zip(pf["chunk"].astype(int), pf["context"].astype(int)))
    mp = pf["measured_s"].to_numpy(float)

    def make_pf(x):
        e = np.exp(x)
        return _kernel_with(k, attn_prefill_eff_compute=float(e[0]), attn_prefill_eff_mem=float(e[1]),
                            attn_prefill_floor_s=float(e[2]), attn_prefill_per_token_s=float(e[3]),
                            attn_prefill_ctx_eff_compute=float(e[4]))

    def res_pf(x):
        m = build_model(model, gpu, tp, make_pf(x))
        return np.log(np.array([m.attention_prefill_layer_s([c]) for c in chunks]) / mp)

    r = _ls(res_pf, np.log([0.4, 0.6, 1e-5, 1e-8, 0.4]), np.log([0.02, 0.02, 1e-8, 1e-12, 0.02]),
            np.log([1.0, 1.5, 1e-3, 1e-6, 1.0]))
    return make_pf(r.x)


# ----------------------------------------------------------------------------- 5. engine
ENGINE_FEATURES = ("fixed_s", "per_layer_s", "per_layer_tp_s", "per_seq_s", "per_token_s",
                   "kernel_slowdown_per_token")


def splitwise_features(sw: pd.DataFrame, kernels: dict[str, KernelParams]) -> tuple[np.ndarray, np.ndarray]:
    """Kernel-only predicted time and the engine-overhead feature matrix of each Splitwise row."""
    kern_t, feats = [], []
    cache: dict = {}
    for r in sw.itertuples(index=False):
        key = (r.model, r.gpu, r.tp)
        if key not in cache:
            gpu_kernel = kernels.get(r.gpu) or kernels["default"]
            cache[key] = build_model(r.model, r.gpu, r.tp, gpu_kernel)
        m = cache[key]
        L = m.model.num_layers
        if r.kind == "prefill":
            t = m.iteration_time_s([(r.prompt, 0)] * r.batch, 0, 0, 0)
            ntok = r.batch * r.prompt
        else:
            t = m.iteration_time_s((), r.batch, r.batch * (r.prompt + r.output / 2), 0)
            ntok = r.batch
        kern_t.append(t)
        feats.append([1.0, L, L * (r.tp - 1), r.batch, ntok, ntok * t])
    return np.array(kern_t), np.array(feats, float)


def fit_engine(sw: pd.DataFrame, kernels: dict[str, KernelParams]) -> EngineParams:
    train = sw[(sw["excluded"] == "") & ~sw.apply(
        lambda r: is_heldout_splitwise(r["model"], r["gpu"], r["tp"]), axis=1)]
    kt, X = splitwise_features(train, kernels)
    meas = train["measured_s"].to_numpy(float)
    scale = np.array([1e-3, 1e-4, 1e-5, 1e-4, 1e-6, 1e-5])

    def res(x):
        return np.log((kt + X @ (x * scale)) / meas)

    r = _ls(res, np.ones(6), np.zeros(6), np.full(6, np.inf))
    theta = r.x * scale
    return EngineParams(**{k: float(v) for k, v in zip(ENGINE_FEATURES, theta)})
