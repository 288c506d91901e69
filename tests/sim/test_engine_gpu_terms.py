"""GPU work of an engine step outside the profiled kernels (issue 23, fifth session): the sampler,
kernel boundaries of a CUDA-graphed step, and the engine's all-reduce latency per TP degree. GPU
work is never hidden by asynchronous scheduling; CPU work is."""

from __future__ import annotations

import dataclasses

import pytest

from inferencegym.sim.calibration.engines import VLLM_V1_GPU
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_params import EngineParams, engine_params


def _v1(model: str = "llama-2-7b", tp: int = 1, **engine) -> ExecutionModel:
    m = ExecutionModel.from_preset(model=model, gpu="h100-80gb", tensor_parallel=tp, engine_profile="vllm-v1")
    return m._replace(engine=dataclasses.replace(m.engine, **engine)) if engine else m


def test_gpu_terms_add_to_the_step_even_when_scheduling_is_asynchronous():
    base = _v1(gpu_fixed_s=0.0, gpu_per_layer_s=0.0, sampler_s_per_logit=0.0)
    more = _v1(gpu_fixed_s=3e-4, gpu_per_layer_s=1e-5, sampler_s_per_logit=0.0)
    cpu_only = _v1(gpu_fixed_s=0.0, gpu_per_layer_s=0.0, sampler_s_per_logit=0.0, fixed_s=3e-3)
    a0, b0 = base.decode_coeffs(12)
    a1, b1 = more.decode_coeffs(12)
    assert a1 - a0 == pytest.approx(3e-4 + 32 * 1e-5) and b1 == b0
    assert cpu_only.decode_coeffs(12)[0] == pytest.approx(a0)  # CPU work under the kernels: hidden
    t0 = base.iteration_time_s([(200, 0)], 12, 12 * 900)
    assert more.iteration_time_s([(200, 0)], 12, 12 * 900) - t0 == pytest.approx(3e-4 + 32 * 1e-5)


def test_sampler_time_grows_with_sequences_and_vocabulary():
    s = 1e-10
    m7 = _v1(sampler_s_per_logit=s)
    z7 = _v1(sampler_s_per_logit=0.0)
    for B in (1, 12, 64):
        assert m7.decode_coeffs(B)[0] - z7.decode_coeffs(B)[0] == pytest.approx(s * 32000 * B)
    m8 = _v1("llama-3-8b", sampler_s_per_logit=s)
    z8 = _v1("llama-3-8b", sampler_s_per_logit=0.0)
    assert m8.decode_coeffs(12)[0] - z8.decode_coeffs(12)[0] == pytest.approx(s * 128256 * 12)
    # a prefill chunk in the iteration is sampled too
    d = m7.iteration_time_s([(100, 0), (50, 0)], 4, 4000) - z7.iteration_time_s([(100, 0), (50, 0)], 4, 4000)
    assert d == pytest.approx(s * 32000 * 6)


def test_allreduce_latency_per_degree_overrides_the_default_and_reads_back_from_json():
    e = EngineParams(allreduce_latency_s=15e-6, allreduce_latency_tp_s=((2, 5e-6),))
    assert e.engine_allreduce_latency_s(2) == 5e-6
    assert e.engine_allreduce_latency_s(4) == 15e-6 and e.engine_allreduce_latency_s(8) == 15e-6
    d = e.to_dict()
    d["allreduce_latency_tp_s"] = [list(p) for p in d["allreduce_latency_tp_s"]]  # as JSON stores it
    assert EngineParams.from_dict(d) == e
    lo = _v1("codellama-34b", 2, allreduce_latency_tp_s=((2, 2e-6),))
    hi = _v1("codellama-34b", 2, allreduce_latency_tp_s=((2, 20e-6),))
    # two all-reduces a layer, 48 layers
    assert hi.decode_coeffs(22)[0] - lo.decode_coeffs(22)[0] == pytest.approx(2 * 48 * 18e-6, rel=1e-6)


def test_vllm_v1_carries_the_measured_terms_and_v0_keeps_its_single_synchronous_term():
    v1, v0 = engine_params("vllm-v1"), engine_params("vllm-v0")
    assert (v1.gpu_fixed_s, v1.gpu_per_layer_s, v1.sampler_s_per_logit) == VLLM_V1_GPU
    assert all(x > 0 for x in VLLM_V1_GPU)
    assert dict(v1.allreduce_latency_tp_s).keys() == {2}  # TP4 is the default (its own rows)
    assert dict(v1.allreduce_latency_tp_s)[2] < v1.allreduce_latency_s  # one-shot reads fewer peers
    assert v0.gpu_fixed_s == v0.gpu_per_layer_s == v0.sampler_s_per_logit == 0.0
    assert v0.allreduce_latency_tp_s == ()
    for name in ("vllm-2023", "kernel-only"):
        e = engine_params(name)
        assert e.gpu_fixed_s == e.gpu_per_layer_s == e.sampler_s_per_logit == 0.0


def test_the_sampler_slope_is_per_gpu_where_a_gpu_was_timed():
    from inferencegym.sim.calibration.engines import VLLM_V1_SAMPLER_S_PER_LOGIT_GPU

    e = engine_params("vllm-v1")
    assert e.sampler_s_per_logit_gpu == VLLM_V1_SAMPLER_S_PER_LOGIT_GPU
    h200 = dict(VLLM_V1_SAMPLER_S_PER_LOGIT_GPU)["h200-141gb"]
    assert e.sampler_s_per_logit_on("h200-141gb") == h200 < e.sampler_s_per_logit  # measured 0.85x
    assert e.sampler_s_per_logit_on("h100-80gb") == e.sampler_s_per_logit == e.sampler_s_per_logit_on("a100-80gb")
    for gpu, slope in (("h100-80gb", e.sampler_s_per_logit), ("h200-141gb", h200)):
        m = ExecutionModel.from_preset(model="llama-3-8b", gpu=gpu, engine_profile="vllm-v1")
        z = m._replace(engine=dataclasses.replace(m.engine, sampler_s_per_logit=0.0, sampler_s_per_logit_gpu=()))
        assert m.decode_coeffs(64)[0] - z.decode_coeffs(64)[0] == pytest.approx(slope * 128256 * 64)
    d = e.to_dict()
    d["sampler_s_per_logit_gpu"] = [list(p) for p in d["sampler_s_per_logit_gpu"]]  # as JSON stores it
    assert EngineParams.from_dict(d) == e
    assert engine_params("vllm-v0").sampler_s_per_logit_gpu == ()  # V0 prices no GPU sampler
