"""The MoE/FP8 figures fitted on the MoE layer measured on an H100 (sim/calibration/moe_gpu_fit.py),
and their transfer to the same kernels measured on an H200."""

import pytest

from inferencegym.sim.calibration import moe_gpu_fit as G
from inferencegym.sim.moe import MOE_KERNEL_COMPUTE_EFFICIENCY, MOE_KERNEL_FP8_FACTOR, moe_kernel_efficiency

BIG = (1024, 1 << 30)
MID = (8, 1024)


@pytest.fixture(scope="module")
def report():
    return G.report()


def test_the_committed_figures_are_what_the_fit_gives_on_the_committed_measurements(report):
    assert report["device"].startswith("NVIDIA H100")
    committed, fitted = report["committed"]["cutlass"], report["cutlass_bf16"]
    assert committed["efficiency"] == pytest.approx(fitted["efficiency"], abs=0.005)
    assert committed["stream"] == pytest.approx(fitted["stream"], abs=0.05)
    assert committed["tile_k0"] == pytest.approx(fitted["tile_k0"], abs=5)
    assert MOE_KERNEL_FP8_FACTOR["cutlass"] == pytest.approx(report["cutlass_fp8_factor"], abs=0.005)
    assert MOE_KERNEL_FP8_FACTOR["triton"] == pytest.approx(report["triton_fp8_factor"], abs=0.005)


def test_fitted_rows_hold_and_the_triton_fp8_check_rows_within_30_percent(report):
    fit = [x for x in report["experts"] if x["kernel"] == "cutlass" and x["dtype"] == "bf16"]
    big = [x for x in fit if x["n_tokens"] >= 1024]
    assert len(fit) == 40 and len(big) == 16
    assert max(abs(x["model_us"] / x["measured_us"] - 1) for x in big) < 0.2
    assert sum(abs(x["model_us"] / x["measured_us"] - 1) for x in big) / len(big) < 0.1
    check = [x for x in report["experts"] if x["kernel"] == "triton" and not x["fit"]]
    # 256-512 tokens: -25 / -27 % (Triton's FP8 kernel streams the weights at ~1.7 TB/s, half the
    # H100's HBM rate, at those batches; not modelled; -20 / -6 % against the 2024 GEMM fit)
    assert len(check) == 5 and max(abs(x["model_us"] / x["measured_us"] - 1) for x in check) < 0.3
    # before the FP8 factor the same check rows were off by up to a third
    assert max(abs(x["before_us"] / x["measured_us"] - 1) for x in check) > 0.25


def test_the_h100_fitted_cutlass_figures_transfer_to_the_h200_rows(report):
    """The same grouped GEMMs measured on an H200 (3.35 -> 4.8 TB/s, same SMs): predicted from the
    H100 fit within the H200's own fit's error; the 2024-stage efficiency alone predicted 0.64-0.99."""
    t = report["transfer"]
    lo, med, hi, mae = t["h100->h200"][BIG]
    assert 0.85 < lo and hi < 1.25 and abs(med - 1) < 0.08 and mae < 0.12
    lo, med, hi, mae = t["h100->h200"][MID]
    assert 0.8 < lo and hi < 1.25 and mae < 0.12
    assert t["h100->h200"][BIG][3] < t["h200->h200"][BIG][3] + 0.03
    # fitted on the H200 instead: the same figures within ~20 %
    a, b = t["fit_h100"], t["fit_h200"]
    assert abs(a["efficiency"] / b["efficiency"] - 1) < 0.05 and abs(a["stream"] / b["stream"] - 1) < 0.1
    assert abs(a["tile_k0"] / b["tile_k0"] - 1) < 0.25


def test_the_stream_ceiling_is_set_by_the_sms_not_the_hbm():
    """Weight-bound grouped GEMMs (every expert active, few rows each): the H200's 43 % more HBM
    bandwidth buys ~12 % (measured) because the SMs, not the HBM, bound the stream."""
    from inferencegym.sim.calibration.moe_gpu_fit import _experts_us, committed_cutlass

    figs = committed_cutlass()
    h100, h200 = (_experts_us("qwen3-30b-a3b", "bf16", figs, 256, gpu=g) for g in ("h100-80gb", "h200-141gb"))
    assert 0.8 < h200 / h100 < 0.95
    no_ceiling = {**figs, "stream": 0.0}
    a, b = (_experts_us("qwen3-30b-a3b", "bf16", no_ceiling, 256, gpu=g) for g in ("h100-80gb", "h200-141gb"))
    assert b / a < 0.75


def test_the_h200_fp8_tier_predicts_the_h100_dense_fp8_speed_ups_out_of_sample(report):
    d = report["dense_fp8"]
    assert len(d) == 80
    mape = sum(abs(x["predicted"] / x["measured"] - 1) for x in d) / len(d)
    assert mape < 0.10


def test_fp8_factor_applies_only_to_fp8_grouped_gemms():
    assert moe_kernel_efficiency("triton", fp8=True) == pytest.approx(
        MOE_KERNEL_COMPUTE_EFFICIENCY["triton"] * MOE_KERNEL_FP8_FACTOR["triton"])
    assert moe_kernel_efficiency("triton") == MOE_KERNEL_COMPUTE_EFFICIENCY["triton"]
    with pytest.raises(ValueError, match="unknown moe_kernel 'x'; valid: triton, deepgemm, cutlass"):
        moe_kernel_efficiency("x")


def test_unfused_routing_costs_more_than_the_fused_fixed_time_it_bounds(report):
    from inferencegym.sim.moe import MOE_LAYER_FIXED_S

    one = [us for (shape, n), us in report["routing_us"].items() if n == 1]
    assert len(one) == 2 and min(one) > 1e6 * MOE_LAYER_FIXED_S


def test_measured_triton_moe_reproduces_vllm_and_the_narrow_tp2_shard_is_not_slower():
    """The vLLM-style Triton fused MoE measured on a lent H200 (benchmarks/gpu_triton_moe.py):
    at PR #44818's shape it reproduces vLLM's published tuned layer; at Qwen3-30B-A3B's TP2 shard
    (2048 x 384) it keeps the TP1 shape's throughput; the model's Triton GEMMs are slower than the
    measured ones at 8k-16k tokens, so the MoE kernel is not why the H200 TP2 offline run is
    simulated fast."""
    from inferencegym.sim.calibration.moe_fit import FIT_ROWS_H200_BF16

    rows = {(x["shape"], x["n_tokens"]): x for x in G.triton_measured("h200-141gb")}
    assert len(rows) == 27
    for n in (1024, 2048, 4096):  # GEMMs + SiLU*mul + top-k sum against vLLM's benchmark_moe.py totals
        assert abs(rows["pr44818", n]["experts_us"] / FIT_ROWS_H200_BF16[n] - 1) < 0.08, n
    for n in (8192, 16384):
        tp1, tp2 = rows["qwen3-30b-a3b", n]["tflops"], rows["qwen3-30b-a3b-tp2", n]["tflops"]
        assert tp2 > 0.85 * tp1 and tp2 > 400
        assert rows["qwen3-30b-a3b-tp2", n]["model_gemm_us"] > 1.2 * rows["qwen3-30b-a3b-tp2", n]["gemm_us"]
    # Triton beats CUTLASS at every compute-bound row of the three shapes
    assert all(x["gemm_us"] < x["cutlass_us"] for x in rows.values() if x["n_tokens"] >= 1024)


def test_the_triton_kernels_rising_efficiency_is_the_fill_of_its_128_row_tiles():
    """Compute-bound Triton rows (2,048-16,384 tokens, BLOCK_SIZE_M 128): throughput / tile fill is
    one peak per shape within 10 %: the rise with tokens is the padding of each expert's rows."""
    assert G.tile_fill(128 * 10000, 128, 128) > 0.98 and 0.45 < G.tile_fill(1024 * 8, 128, 128) < 0.55
    rows = G.triton_measured("h200-141gb")
    for shape in ("qwen3-30b-a3b", "qwen3-30b-a3b-tp2", "pr44818"):
        xs = [x for x in rows if x["shape"] == shape and x["n_tokens"] >= 2048]
        assert all(x["block_m"] == 128 for x in xs)
        peaks = [x["tflops"] / x["tile_fill"] for x in xs]
        assert max(peaks) / min(peaks) < 1.10, (shape, peaks)
