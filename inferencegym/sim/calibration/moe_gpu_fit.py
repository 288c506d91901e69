"""Fit the MoE kernels' FP8 and CUTLASS figures on a MoE layer measured on one H100; check FP8 GEMMs.

``python -m inferencegym.sim.calibration.moe_gpu_fit`` reads ``inferencegym/data/moe_profiles/h100-80gb.json``
(``benchmarks/gpu_profile_moe.py`` on a lent H100: the routed experts of four MoE shapes through PyTorch's
grouped GEMMs, ``torch._grouped_mm`` in BF16 and ``torch._scaled_grouped_mm`` in FP8 e4m3 with rowwise
scales, CUTLASS kernels on Hopper; whole BF16 layers with routing; dense BF16/FP8 GEMMs) and the
published vLLM Triton rows of :mod:`~inferencegym.sim.calibration.moe_fit`, and prints:

1. **CUTLASS grouped GEMMs, BF16**: three figures of the family against the ``vllm-v1`` dense GEMM fit
   (today's GEMMs; ``moe_fit.GEMM_STAGE``): the compute efficiency
   (``moe.MOE_KERNEL_COMPUTE_EFFICIENCY["cutlass"]``), the latency-bound weight stream in bytes per
   SM cycle (``moe.MOE_KERNEL_STREAM_BYTES_PER_SM_CYCLE``) and the per-tile fixed cost in reduction
   elements (``moe.MOE_KERNEL_TILE_K0``), fitted on every BF16 row (1-8,192 tokens) of the four
   shapes; the **transfer check** predicts the same kernels measured on an H200
   (``h200-141gb.json``: 3.35 -> 4.8 TB/s, the same 132 SMs and clock) from the H100 figures, and
   fits the H200 rows alone to compare the figures;
2. **FP8 grouped GEMMs per kernel family** (``moe.MOE_KERNEL_FP8_FACTOR``): the fraction of the FP8
   tier's dense speed-up a family's FP8 grouped GEMMs reach, fitted on the compute-bound rows:
   ``cutlass`` on the measured ``fp8-gemm`` rows (the FP8 grouped GEMMs on pre-quantized inputs),
   ``triton`` on vLLM pull request #24700's Qwen3-30B-A3B FP8 W8A8 rows on H100 (its rows below
   1,024 tokens are the check);
3. **dense FP8 on a second GPU**: the FP8 tier (``presets.FP8_COMPUTE_EFFICIENCY``, fitted on H200
   GEMMs) against the measured H100 BF16/FP8 speed-ups of Llama-2-7B's and the Llama-3-70B TP4
   shard's GEMMs, out of sample;
4. **routing in unfused PyTorch**: whole layer minus routed experts (router GEMM, softmax top-k, sort,
   gather, weighted sum as separate kernels): an upper bound of ``moe.MOE_LAYER_FIXED_S`` (vLLM fuses them).
The fitted figures are committed in ``sim/moe.py``; the tests refit them from the committed file.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import cache
from pathlib import Path
from statistics import median

from scipy.optimize import minimize, minimize_scalar

from inferencegym.sim.calibration.moe_fit import CHECK_ROWS_H100_FP8, _gemma_moe, experts_time_us

MOE_PROFILE = Path(__file__).resolve().parents[2] / "data" / "moe_profiles" / "h100-80gb.json"
MOE_PROFILE_H200 = MOE_PROFILE.with_name("h200-141gb.json")
TRITON_MEASURED = {g: MOE_PROFILE.with_name(f"triton-{g}.json") for g in ("h100-80gb", "h200-141gb")}
"""``benchmarks/gpu_triton_moe.py`` on a lent H100 and H200 (2026-11-26): a vLLM-style Triton fused MoE with
vLLM's tuned H200 tile configs, per part, beside CUTLASS on the same rows."""
GPU = "h100-80gb"
FIT_MIN_TOKENS = 1024
"""Rows at or above this many tokens are compute-bound for every measured shape (the fit rows)."""
DENSE_FP8_SHAPES = {"llama-2-7b": ("llama-2-7b", 1), "llama-3-70b-tp4": ("llama-3-70b", 4)}
_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


@cache
def shape_models() -> dict:
    """Measured shape name -> the model preset whose MoE layer has that shape (at TP1)."""
    from inferencegym.sim.presets import ModelPreset, get_model

    mixtral = ModelPreset(name="mixtral-8x7b-tp2-moe-layer", num_layers=1, hidden_size=4096, num_heads=32,
                          num_kv_heads=8, ffn_size=7168, vocab_size=32000, num_experts=8, experts_per_token=2,
                          moe_ffn_size=7168)
    q = get_model("qwen3-30b-a3b")
    return {"qwen3-30b-a3b": q, "gpt-oss-120b": get_model("gpt-oss-120b"),
            "pr44818": _gemma_moe(), "mixtral-8x7b-tp2": mixtral,
            "qwen3-30b-a3b-tp2": replace(q, name="qwen3-30b-a3b-tp2-moe-layer", moe_ffn_size=q.moe_ffn_size // 2)}


def load(path: Path = MOE_PROFILE) -> dict:
    """``{"info": ..., "rows": [...]}`` of the measured file (FileNotFoundError names it)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"MoE profile {p} not found; expected the file benchmarks/gpu_profile_moe.py "
                                "writes (reinstall the package or pass its path)")
    return json.loads(p.read_text("utf-8"))


def _rows(d: dict, op: str, dtype: str) -> list[dict]:
    return [r for r in d["rows"] if r["op"] == op and r["dtype"] == dtype and "time_s" in r]


def _experts_us(shape: str, dtype: str, figs: dict, n: int, fp8_factor: float = 1.0, gpu: str = GPU) -> float:
    """Modelled routed experts of a measured shape at the CUTLASS figures ``figs`` (``efficiency``,
    ``stream``, ``tile_k0``; no fixed time: the rows time the GEMMs alone)."""
    q = "fp16" if dtype == "bf16" else "fp8"
    return experts_time_us(shape_models()[shape], gpu, q, figs["efficiency"], n, fixed_s=0.0, fp8_factor=fp8_factor,
                           stream=figs["stream"], tile_k0=figs["tile_k0"])


def _fit(loss, lo: float, hi: float) -> float:
    return round(float(minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}).x), 3)


def _log_err(rows: list[dict], dtype: str, figs: dict, gpu: str, fp8_factor: float = 1.0) -> float:
    return sum(math.log(_experts_us(r["shape"], dtype, figs, r["n_tokens"], fp8_factor, gpu) / r["time_s"] / 1e6) ** 2
               for r in rows)


def fit_cutlass_bf16(d: dict, gpu: str = GPU) -> dict:
    """The CUTLASS grouped GEMMs' three figures on every measured BF16 row of ``d`` (1-8,192 tokens):
    compute ``efficiency`` relative to the ``vllm-v1`` dense fit of ``gpu``, the latency-bound weight
    ``stream`` (bytes per SM cycle) and the per-tile fixed cost ``tile_k0`` (reduction elements)."""
    rows = _rows(d, "moe_experts", "bf16")

    def loss(x) -> float:
        e, st, k0 = x
        if e <= 0.05 or st <= 0.5 or k0 < 0:
            return 1e9
        return _log_err(rows, "bf16", {"efficiency": e, "stream": st, "tile_k0": k0}, gpu)

    x = minimize(loss, x0=[0.8, 10.0, 500.0], method="Nelder-Mead",
                 options={"xatol": 1e-4, "fatol": 1e-9, "maxiter": 2000}).x
    return {"efficiency": round(float(x[0]), 3), "stream": round(float(x[1]), 2), "tile_k0": round(float(x[2]))}


def fit_cutlass_fp8(d: dict, figs: dict) -> float:
    """FP8 factor of the CUTLASS grouped GEMMs: fitted on measured ``fp8-gemm`` compute-bound rows."""
    rows = [r for r in _rows(d, "moe_experts", "fp8-gemm") if r["n_tokens"] >= FIT_MIN_TOKENS]
    return _fit(lambda f: _log_err(rows, "fp8-gemm", figs, GPU, f), 0.2, 1.5)


def fit_triton_fp8() -> float:
    """FP8 factor of vLLM's Triton fused MoE: fitted on #24700's compute-bound rows (H100, Qwen3 FP8),
    the layer's fixed time included as ``benchmark_moe.py`` times it."""
    from inferencegym.sim.moe import MOE_KERNEL_COMPUTE_EFFICIENCY
    from inferencegym.sim.presets import get_model

    e, m = MOE_KERNEL_COMPUTE_EFFICIENCY["triton"], get_model("qwen3-30b-a3b")
    rows = {n: us for n, us in CHECK_ROWS_H100_FP8.items() if n >= FIT_MIN_TOKENS}
    return _fit(lambda f: sum(math.log(experts_time_us(m, GPU, "fp8", e, n, fp8_factor=f) / us) ** 2
                              for n, us in rows.items()), 0.1, 1.5)


def dense_fp8_ratio_errors(d: dict) -> list[dict]:
    """Measured vs modelled BF16/FP8 speed-up of the dense GEMM rows (the FP8 tier as committed)."""
    from inferencegym.sim.execution import ExecutionModel

    times: dict = {}
    for r in d["rows"]:
        if r["op"] == "gemm" and r["shape"] in DENSE_FP8_SHAPES and "time_s" in r:
            times.setdefault((r["shape"], r["index"], r["n_tokens"]), {})[r["dtype"]] = r["time_s"]
    models = {}
    out = []
    for (shape, i, n), t in sorted(times.items()):
        model, tp = DENSE_FP8_SHAPES[shape]
        if shape not in models:
            models[shape] = tuple(ExecutionModel.from_preset(model=model, gpu=GPU, tensor_parallel=tp, quantization=q,
                                                             engine_profile="kernel-only")
                                  for q in ("fp16", "fp8"))
        b, f = models[shape]
        op = _OPS[i]
        pred = b.layer_op_times_s(n)[op] / f.layer_op_times_s(n)[op]
        out.append({"shape": shape, "op": op, "n_tokens": n, "measured": t["bf16"] / t["fp8"], "predicted": pred})
    return out


def routing_overhead_us(d: dict) -> dict:
    """Whole BF16 layer minus its routed experts, per shape and token count (microseconds)."""
    ex = {(r["shape"], r["n_tokens"]): r["time_s"] for r in _rows(d, "moe_experts", "bf16")}
    return {(r["shape"], r["n_tokens"]): 1e6 * (r["time_s"] - ex[(r["shape"], r["n_tokens"])])
            for r in _rows(d, "moe_layer", "bf16") if (r["shape"], r["n_tokens"]) in ex}


def committed_cutlass() -> dict:
    """The CUTLASS figures committed in ``sim/moe.py`` (the keys of :func:`fit_cutlass_bf16`)."""
    from inferencegym.sim.moe import (MOE_KERNEL_COMPUTE_EFFICIENCY, MOE_KERNEL_STREAM_BYTES_PER_SM_CYCLE,
                                      MOE_KERNEL_TILE_K0)

    return {"efficiency": MOE_KERNEL_COMPUTE_EFFICIENCY["cutlass"],
            "stream": MOE_KERNEL_STREAM_BYTES_PER_SM_CYCLE["cutlass"], "tile_k0": MOE_KERNEL_TILE_K0["cutlass"]}


TOKEN_RANGES = ((1, 8), (8, 1024), (1024, 1 << 30))
"""Token ranges the errors are stated by: few experts active, weight-bound, compute-bound."""


def ratio_stats(d: dict, figs: dict, gpu: str, dtype: str = "bf16", fp8_factor: float = 1.0) -> dict:
    """Model / measured of every ``dtype`` row of ``d`` on ``gpu`` at ``figs``, by token range:
    ``{(lo, hi): (min, median, max, mean abs error)}``."""
    rat = [(r["n_tokens"], _experts_us(r["shape"], dtype, figs, r["n_tokens"], fp8_factor, gpu) / r["time_s"] / 1e6)
           for r in _rows(d, "moe_experts", dtype)]
    out = {}
    for lo, hi in TOKEN_RANGES:
        v = [x for n, x in rat if lo <= n < hi]
        out[(lo, hi)] = (min(v), median(v), max(v), sum(abs(x - 1) for x in v) / len(v))
    return out


def transfer(d100: dict | None = None, d200: dict | None = None, figs: dict | None = None) -> dict:
    """The CUTLASS figures fitted on one GPU's rows predicting the other GPU's (``"h100->h200"``,
    ``"h200->h100"``) beside each GPU's own fit, and the single-constant form before (efficiency
    only, refitted on the H100 at the 2024 ``kernel-only`` stage it was fitted on: 0.808)."""
    d100 = load() if d100 is None else d100
    d200 = load(MOE_PROFILE_H200) if d200 is None else d200
    f100 = fit_cutlass_bf16(d100) if figs is None else figs
    f200 = fit_cutlass_bf16(d200, "h200-141gb")
    return {"fit_h100": f100, "fit_h200": f200,
            "h100->h100": ratio_stats(d100, f100, GPU), "h100->h200": ratio_stats(d200, f100, "h200-141gb"),
            "h200->h200": ratio_stats(d200, f200, "h200-141gb"), "h200->h100": ratio_stats(d100, f200, GPU)}


def report(d: dict | None = None) -> dict:
    """Every fitted figure and per-row error (what ``main`` prints; the tests read it)."""
    from inferencegym.sim.moe import MOE_KERNEL_COMPUTE_EFFICIENCY, MOE_KERNEL_FP8_FACTOR

    d = load() if d is None else d
    figs = fit_cutlass_bf16(d)
    cf = fit_cutlass_fp8(d, figs)
    tf = fit_triton_fp8()
    rows = []
    for dtype, f in (("bf16", 1.0), ("fp8-gemm", cf)):
        for r in _rows(d, "moe_experts", dtype):
            sim = _experts_us(r["shape"], dtype, figs, r["n_tokens"], f)
            rows.append({"kernel": "cutlass", "dtype": dtype, "shape": r["shape"], "n_tokens": r["n_tokens"],
                         "measured_us": 1e6 * r["time_s"], "model_us": sim, "fit": dtype == "bf16"
                         or r["n_tokens"] >= FIT_MIN_TOKENS})
    from inferencegym.sim.presets import get_model

    m = get_model("qwen3-30b-a3b")
    for n, us in CHECK_ROWS_H100_FP8.items():
        sim = experts_time_us(m, GPU, "fp8", MOE_KERNEL_COMPUTE_EFFICIENCY["triton"], n, fp8_factor=tf)
        before = experts_time_us(m, GPU, "fp8", MOE_KERNEL_COMPUTE_EFFICIENCY["triton"], n, fp8_factor=1.0)
        rows.append({"kernel": "triton", "dtype": "fp8", "shape": "qwen3-30b-a3b (PR #24700)", "n_tokens": n,
                     "measured_us": us, "model_us": sim, "before_us": before, "fit": n >= FIT_MIN_TOKENS})
    return {"cutlass_bf16": figs, "cutlass_bf16_efficiency": figs["efficiency"], "cutlass_fp8_factor": cf,
            "triton_fp8_factor": tf, "committed": {"cutlass": committed_cutlass(),
                                                   "fp8_factor": dict(MOE_KERNEL_FP8_FACTOR)},
            "transfer": transfer(d, figs=figs),
            "experts": rows, "dense_fp8": dense_fp8_ratio_errors(d), "routing_us": routing_overhead_us(d),
            "device": d["info"]["device"]}


def tile_fill(pairs: int, experts: int, block_m: int) -> float:
    """Useful over computed rows of a grouped GEMM whose experts' rows are padded to ``block_m``
    (vLLM's ``moe_align_block_size``): ``pairs`` token-expert pairs spread uniformly over ``experts``
    (each expert's count binomial), ``E[rows] / (block_m * E[ceil(rows / block_m)])``."""
    from scipy.stats import binom

    p = 1.0 / experts
    tiles = sum(float(binom.sf(j * block_m, pairs, p)) for j in range(pairs // block_m + 2))
    return pairs * p / (block_m * tiles)


def triton_measured(gpu: str = "h200-141gb", path: Path | None = None) -> list[dict]:
    """The measured Triton rows of ``gpu`` beside the model: per shape and token count the two
    grouped GEMMs (``gemm_us``), the whole measured path less its PyTorch-op sort (``experts_us``:
    GEMMs + SiLU*mul + top-k sum, as vLLM's fused kernels do them but unfused here), CUTLASS on the
    same rows, the modelled GEMMs at the committed ``triton`` figures (``model_gemm_us``) and the
    tuned config's ``block_m`` with the :func:`tile_fill` it implies."""
    from inferencegym.sim.calibration.moe_fit import _layer
    from inferencegym.sim.moe import MOE_KERNEL_COMPUTE_EFFICIENCY

    d = load(path or TRITON_MEASURED[gpu])
    t: dict = {}
    bm: dict = {}
    for r in d["rows"]:
        if r.get("kernel") in ("triton", "cutlass") and "time_s" in r:
            t.setdefault((r["shape"], r["n_tokens"]), {})[(r["kernel"], r["part"])] = 1e6 * r["time_s"]
            if r["kernel"] == "triton":
                bm[r["shape"], r["n_tokens"]] = r["config"]["BLOCK_SIZE_M"]
    out = []
    for (shape, n), v in sorted(t.items()):
        m = _layer(shape_models()[shape], gpu, "fp16").retuned(
            grouped_compute_efficiency=MOE_KERNEL_COMPUTE_EFFICIENCY["triton"])
        pairs, active = n * m.k, m.experts_gpu * (1.0 - (1.0 - m.k / m.E) ** n)
        e, k, f = m.E, shape_models()[shape].hidden_size, shape_models()[shape].moe_ffn_size
        gemm = v[("triton", "gemm1")] + v[("triton", "gemm2")]
        out.append({"shape": shape, "n_tokens": n, "gemm_us": gemm, "tflops": 6.0 * k * f * pairs / gemm / 1e6,
                    "experts_us": gemm + v[("triton", "act")] + v[("triton", "reduce")],
                    "cutlass_us": v[("cutlass", "experts")], "experts": e, "block_m": bm[shape, n],
                    "tile_fill": tile_fill(n * m.k, e, bm[shape, n]),
                    "model_gemm_us": 1e6 * (m._gemm(m.up, pairs, active) + m._gemm(m.down, pairs, active))})
    return out


def _ape(a: float, b: float) -> float:
    return 100.0 * abs(a / b - 1.0)


def _ranges(st: dict) -> str:
    return "; ".join(f"{lo}-{min(hi, 8192) if hi < 1 << 30 else 8192} tok {a:.2f}/{b:.2f}/{c:.2f} (mean abs {100 * e:.0f} %)"
                     for (lo, hi), (a, b, c, e) in st.items())


def main() -> None:
    r = report()
    print(f"device: {r['device']}")
    print(f"CUTLASS grouped BF16 figures (vs the vllm-v1 dense fit): {r['cutlass_bf16']}; FP8 factor: "
          f"cutlass {r['cutlass_fp8_factor']:.3f}, triton {r['triton_fp8_factor']:.3f}; committed {r['committed']}")
    t = r["transfer"]
    print(f"fitted on the H200 rows instead: {t['fit_h200']}")
    for k in ("h100->h100", "h100->h200", "h200->h200", "h200->h100"):
        print(f"  {k}: model/measured min/median/max by tokens: {_ranges(t[k])}")
    for x in r["experts"]:
        extra = f"  before {x['before_us']:7.1f} ({x['before_us'] / x['measured_us'] - 1:+.0%})" if "before_us" in x else ""
        print(f"{x['kernel']:7s} {x['dtype']:8s} {x['shape']:26s} {x['n_tokens']:5d} {'fit  ' if x['fit'] else 'check'} "
              f"measured {x['measured_us']:7.1f} us  model {x['model_us']:7.1f} "
              f"({x['model_us'] / x['measured_us'] - 1:+.0%}){extra}")
    dense = r["dense_fp8"]
    print(f"dense FP8 speed-up on H100 (FP8 tier fitted on H200): {len(dense)} GEMMs, ratio MAPE "
          f"{sum(_ape(x['predicted'], x['measured']) for x in dense) / len(dense):.1f} %, measured median "
          f"{median(x['measured'] for x in dense):.2f}x, modelled median {median(x['predicted'] for x in dense):.2f}x")
    for (shape, n), us in sorted(r["routing_us"].items()):
        print(f"routing in unfused PyTorch {shape:14s} {n:5d} tokens: {us:6.1f} us")
    for g in TRITON_MEASURED:
        for x in triton_measured(g):
            if x["n_tokens"] >= 64:
                print(f"triton measured {g[:4]} {x['shape']:18s} {x['n_tokens']:5d}: GEMMs {x['gemm_us']:7.1f} us "
                      f"({x['tflops']:3.0f} TF/s), + act + sum {x['experts_us']:7.1f}, CUTLASS {x['cutlass_us']:7.1f}; "
                      f"model GEMMs {x['model_gemm_us']:7.1f} ({x['model_gemm_us'] / x['gemm_us'] - 1:+.0%}); "
                      f"tile fill {x['tile_fill']:.2f} (BLOCK_M {x['block_m']})")


if __name__ == "__main__":
    main()
