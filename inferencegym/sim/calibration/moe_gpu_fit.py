"""Fit the MoE kernels' FP8 and CUTLASS figures on a MoE layer measured on one H100; check FP8 GEMMs.

``python -m inferencegym.sim.calibration.moe_gpu_fit`` reads ``inferencegym/data/moe_profiles/h100-80gb.json``
(``benchmarks/gpu_profile_moe.py`` on a lent H100: the routed experts of four MoE shapes through PyTorch's
grouped GEMMs, ``torch._grouped_mm`` in BF16 and ``torch._scaled_grouped_mm`` in FP8 e4m3 with rowwise
scales, CUTLASS kernels on Hopper; whole BF16 layers with routing; dense BF16/FP8 GEMMs) and the
published vLLM Triton rows of :mod:`~inferencegym.sim.calibration.moe_fit`, and prints:

1. **CUTLASS grouped GEMMs, BF16** (``moe.MOE_KERNEL_COMPUTE_EFFICIENCY["cutlass"]``): the compute
   efficiency relative to the calibrated dense GEMM, fitted on the compute-bound rows (>= 1,024 tokens)
   of the four shapes; the smaller rows are the check;
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
from functools import cache
from pathlib import Path
from statistics import median

from scipy.optimize import minimize_scalar

from inferencegym.sim.calibration.moe_fit import CHECK_ROWS_H100_FP8, _gemma_moe, experts_time_us

MOE_PROFILE = Path(__file__).resolve().parents[2] / "data" / "moe_profiles" / "h100-80gb.json"
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
    return {"qwen3-30b-a3b": get_model("qwen3-30b-a3b"), "gpt-oss-120b": get_model("gpt-oss-120b"),
            "pr44818": _gemma_moe(), "mixtral-8x7b-tp2": mixtral}


def load(path: Path = MOE_PROFILE) -> dict:
    """``{"info": ..., "rows": [...]}`` of the measured file (FileNotFoundError names it)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"MoE profile {p} not found; expected the file benchmarks/gpu_profile_moe.py "
                                "writes (reinstall the package or pass its path)")
    return json.loads(p.read_text("utf-8"))


def _rows(d: dict, op: str, dtype: str) -> list[dict]:
    return [r for r in d["rows"] if r["op"] == op and r["dtype"] == dtype and "time_s" in r]


def _experts_us(shape: str, dtype: str, eff: float, n: int, fp8_factor: float = 1.0) -> float:
    """Modelled routed experts of a measured shape (no fixed time: the rows time the GEMMs alone)."""
    q = "fp16" if dtype == "bf16" else "fp8"
    return experts_time_us(shape_models()[shape], GPU, q, eff, n, fixed_s=0.0, fp8_factor=fp8_factor)


def _fit(loss, lo: float, hi: float) -> float:
    return round(float(minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}).x), 3)


def fit_cutlass_bf16(d: dict) -> float:
    """Grouped-GEMM compute efficiency (relative to the dense fit) of the measured BF16 rows."""
    rows = [r for r in _rows(d, "moe_experts", "bf16") if r["n_tokens"] >= FIT_MIN_TOKENS]
    return _fit(lambda e: sum(math.log(_experts_us(r["shape"], "bf16", e, r["n_tokens"]) / r["time_s"] / 1e6) ** 2
                              for r in rows), 0.2, 2.0)


def fit_cutlass_fp8(d: dict, bf16_eff: float) -> float:
    """FP8 factor of the CUTLASS grouped GEMMs: fitted on measured ``fp8-gemm`` compute-bound rows."""
    rows = [r for r in _rows(d, "moe_experts", "fp8-gemm") if r["n_tokens"] >= FIT_MIN_TOKENS]
    return _fit(lambda f: sum(math.log(_experts_us(r["shape"], "fp8", bf16_eff, r["n_tokens"], f)
                                       / r["time_s"] / 1e6) ** 2 for r in rows), 0.2, 1.5)


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


def report(d: dict | None = None) -> dict:
    """Every fitted figure and per-row error (what ``main`` prints; the tests read it)."""
    from inferencegym.sim.moe import MOE_KERNEL_COMPUTE_EFFICIENCY, MOE_KERNEL_FP8_FACTOR

    d = load() if d is None else d
    ce = fit_cutlass_bf16(d)
    cf = fit_cutlass_fp8(d, ce)
    tf = fit_triton_fp8()
    rows = []
    for dtype, eff, f in (("bf16", ce, 1.0), ("fp8-gemm", ce, cf)):
        for r in _rows(d, "moe_experts", dtype):
            sim = _experts_us(r["shape"], dtype, eff, r["n_tokens"], f)
            rows.append({"kernel": "cutlass", "dtype": dtype, "shape": r["shape"], "n_tokens": r["n_tokens"],
                         "measured_us": 1e6 * r["time_s"], "model_us": sim, "fit": r["n_tokens"] >= FIT_MIN_TOKENS})
    from inferencegym.sim.presets import get_model

    m = get_model("qwen3-30b-a3b")
    for n, us in CHECK_ROWS_H100_FP8.items():
        sim = experts_time_us(m, GPU, "fp8", MOE_KERNEL_COMPUTE_EFFICIENCY["triton"], n, fp8_factor=tf)
        before = experts_time_us(m, GPU, "fp8", MOE_KERNEL_COMPUTE_EFFICIENCY["triton"], n, fp8_factor=1.0)
        rows.append({"kernel": "triton", "dtype": "fp8", "shape": "qwen3-30b-a3b (PR #24700)", "n_tokens": n,
                     "measured_us": us, "model_us": sim, "before_us": before, "fit": n >= FIT_MIN_TOKENS})
    return {"cutlass_bf16_efficiency": ce, "cutlass_fp8_factor": cf, "triton_fp8_factor": tf,
            "committed": {"cutlass": MOE_KERNEL_COMPUTE_EFFICIENCY.get("cutlass"),
                          "fp8_factor": dict(MOE_KERNEL_FP8_FACTOR)},
            "experts": rows, "dense_fp8": dense_fp8_ratio_errors(d), "routing_us": routing_overhead_us(d),
            "device": d["info"]["device"]}


def _ape(a: float, b: float) -> float:
    return 100.0 * abs(a / b - 1.0)


def main() -> None:
    r = report()
    print(f"device: {r['device']}")
    print(f"CUTLASS grouped BF16 efficiency (relative to dense): {r['cutlass_bf16_efficiency']:.3f}; "
          f"FP8 factor: cutlass {r['cutlass_fp8_factor']:.3f}, triton {r['triton_fp8_factor']:.3f}; "
          f"committed {r['committed']}")
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


if __name__ == "__main__":
    main()
