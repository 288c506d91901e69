"""The MoE/FP8 figures fitted on the MoE layer measured on an H100 (sim/calibration/moe_gpu_fit.py)."""

import pytest

from inferencegym.sim.calibration import moe_gpu_fit as G
from inferencegym.sim.moe import MOE_KERNEL_COMPUTE_EFFICIENCY, MOE_KERNEL_FP8_FACTOR, moe_kernel_efficiency


@pytest.fixture(scope="module")
def report():
    return G.report()


def test_the_committed_figures_are_what_the_fit_gives_on_the_committed_measurements(report):
    assert report["device"].startswith("NVIDIA H100")
    assert MOE_KERNEL_COMPUTE_EFFICIENCY["cutlass"] == pytest.approx(report["cutlass_bf16_efficiency"], abs=0.005)
    assert MOE_KERNEL_FP8_FACTOR["cutlass"] == pytest.approx(report["cutlass_fp8_factor"], abs=0.005)
    assert MOE_KERNEL_FP8_FACTOR["triton"] == pytest.approx(report["triton_fp8_factor"], abs=0.005)


def test_compute_bound_grouped_gemms_within_15_percent_and_the_triton_fp8_check_rows_within_25(report):
    fit = [x for x in report["experts"] if x["fit"] and x["kernel"] == "cutlass" and x["dtype"] == "bf16"]
    assert len(fit) == 16 and max(abs(x["model_us"] / x["measured_us"] - 1) for x in fit) < 0.15
    check = [x for x in report["experts"] if x["kernel"] == "triton" and not x["fit"]]
    assert len(check) == 5 and max(abs(x["model_us"] / x["measured_us"] - 1) for x in check) < 0.25
    # before the FP8 factor the same check rows were off by up to a third
    assert max(abs(x["before_us"] / x["measured_us"] - 1) for x in check) > 0.25


def test_the_h200_fp8_tier_predicts_the_h100_dense_fp8_speed_ups_out_of_sample(report):
    d = report["dense_fp8"]
    assert len(d) == 80
    mape = sum(abs(x["predicted"] / x["measured"] - 1) for x in d) / len(d)
    assert mape < 0.10


def test_fp8_factor_applies_only_to_fp8_grouped_gemms():
    assert moe_kernel_efficiency("triton", fp8=True) == pytest.approx(0.45 * MOE_KERNEL_FP8_FACTOR["triton"])
    assert moe_kernel_efficiency("triton") == MOE_KERNEL_COMPUTE_EFFICIENCY["triton"]
    with pytest.raises(ValueError, match="unknown moe_kernel 'x'; valid: triton, deepgemm, cutlass"):
        moe_kernel_efficiency("x")


def test_unfused_routing_costs_more_than_the_fused_fixed_time_it_bounds(report):
    from inferencegym.sim.moe import MOE_LAYER_FIXED_S

    one = [us for (shape, n), us in report["routing_us"].items() if n == 1]
    assert len(one) == 2 and min(one) > 1e6 * MOE_LAYER_FIXED_S
