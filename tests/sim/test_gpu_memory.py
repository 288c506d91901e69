"""vLLM's KV-capacity rule (sim/gpu_memory.py): KV bytes = utilisation x device memory - weights -
the profiling run's peak (forward transients or the sampler's logits buffers at max_num_seqs) -
non-torch memory; checked against vLLM's own start-up logs."""

import json
import statistics
from pathlib import Path

import pytest

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.gpu_memory import (
    NON_TORCH_MULTI_GPU_BYTES,
    NON_TORCH_SINGLE_GPU_BYTES,
    SAMPLER_BYTES_PER_LOGIT,
    sampler_path,
)

GIB = 2**30
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _oss(**kw):
    return ExecutionModel.from_preset(model="gpt-oss-120b", gpu="h100-80gb", quantization="mxfp4", **kw)


def test_kv_memory_is_utilisation_minus_weights_profile_peak_and_non_torch():
    m = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb")
    mem = m.memory
    for seqs in (1, 256, 1024, 8192):
        r = min(seqs, 8192)
        peak = max(mem.forward_peak_bytes, 8192 * 4096 * 2 + r * 128256 * 14.0)
        expected = 0.9 * m.gpu.memory_bytes - m.weight_bytes_per_gpu - peak - NON_TORCH_SINGLE_GPU_BYTES
        assert mem.kv_free_bytes(seqs) == pytest.approx(expected, rel=1e-12)
        assert m.kv_capacity_tokens(1.0, seqs) == int(expected // m.kv_bytes_per_token)
    # the sampler's requests are capped by the profiling run's tokens
    assert mem.kv_free_bytes(8192) == mem.kv_free_bytes(100_000)


def test_the_sampler_buffers_shrink_the_cache_as_max_num_seqs_grows():
    g = _oss()
    caps = [g.kv_capacity_tokens(0.9, s) for s in (64, 512, 1024)]
    assert caps[0] > caps[1] > caps[2] > 0
    # 512 more requests x 201,088 logits x 14 bytes (FlashInfer) = 1.44 GB less KV
    freed = g.memory.kv_free_bytes(512) - g.memory.kv_free_bytes(1024)
    assert freed == pytest.approx(512 * 201088 * 14.0, rel=1e-9)
    # at 64 requests the forward's transients are the peak: fewer requests free nothing more
    assert g.memory.kv_free_bytes(64) == g.memory.kv_free_bytes(32)


def test_v0_engines_sort_in_the_sampler_and_v1_uses_flashinfer():
    assert sampler_path("vllm-v0") == sampler_path("vllm-2023") == "torch-native"
    assert sampler_path("vllm-v1") == sampler_path("kernel-only") == "flashinfer"
    v1 = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb")
    v0 = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb", engine_profile="vllm-v0")
    assert v0.memory.sampler_bytes_per_request == pytest.approx(128256 * 38.0)
    assert v1.memory.sampler_bytes_per_request == pytest.approx(128256 * 14.0)
    assert v0.kv_capacity_tokens() < v1.kv_capacity_tokens()


def test_non_torch_memory_is_larger_on_multi_gpu_replicas():
    assert _oss().memory.non_torch_bytes == NON_TORCH_SINGLE_GPU_BYTES
    assert _oss(tensor_parallel=2).memory.non_torch_bytes == NON_TORCH_MULTI_GPU_BYTES
    assert _oss(pipeline_parallel=2).memory.non_torch_bytes == NON_TORCH_MULTI_GPU_BYTES


def test_gpt_oss_non_kv_memory_matches_vllms_logs_on_one_h100():
    """vllm-project/vllm#23278 (0.90, 8,192 tokens): 'Available KV cache memory: -2.14 GiB';
    #27508 (0.95, 1,024 tokens): 1.71 GiB; both pip installs (PyTorch-native sampler), 65.97 GiB of
    weights logged, max_num_seqs 1,024 (vLLM's H100 default)."""
    mem = _oss().memory
    for util, tokens, kv_logged in ((0.90, 8192, -2.14), (0.95, 1024, 1.71)):
        v = mem.variant(usable_bytes=util * 85_017_493_504, max_batched_tokens=tokens, sampler="torch-native")
        non_kv_logged = v.usable_bytes / GIB - 65.97 - kv_logged
        non_kv = (v.activation_peak_bytes(1024) + v.non_torch_bytes) / GIB
        assert non_kv == pytest.approx(non_kv_logged, rel=0.05)
    # the container's FlashInfer sampler leaves ~2.5 GiB: GPUStack's run started at 32k tokens
    assert _oss().memory.kv_free_bytes(1024) > 32768 * _oss().kv_bytes_per_token


def test_llama_3_8b_v0_kv_memory_matches_the_logged_split():
    """vLLM V0 on an H100 (79.14 GiB at 0.90): weights 14.99, non-torch 0.12, activation peak 1.19,
    KV 54.93 GiB (O'Reilly 'AI Inference on Kubernetes', Example 4-3)."""
    mem = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb", engine_profile="vllm-v0").memory
    v = mem.variant(usable_bytes=0.9 * 79.14 * GIB)
    assert v.activation_peak_bytes(256) / GIB == pytest.approx(1.19, abs=0.1)
    assert v.kv_free_bytes(256) / GIB == pytest.approx(54.93, abs=0.2)


def test_the_torch_native_rate_is_the_measured_one():
    rows = json.loads((RESULTS / "sampler_memory_h100.json").read_text())["rows"]
    measured = statistics.median(r["bytes_per_logit"] for r in rows)
    assert SAMPLER_BYTES_PER_LOGIT["torch-native"] == pytest.approx(measured, rel=0.02)


def test_a_replica_sizes_its_cache_at_its_batch_cap():
    caps = {}
    for cap in (64, 1024):
        rc = ReplicaConfig(model="gpt-oss-120b", gpu="h100-80gb", quantization="mxfp4", batch_cap=cap)
        cl = Cluster(ClusterConfig(replica=rc, num_replicas=1))
        caps[cap] = cl.replicas[0].kv.capacity_blocks * rc.block_size
        assert caps[cap] == pytest.approx(cl.base_model.kv_capacity_tokens(rc.kv_budget_fraction, cap), abs=16)
    assert caps[64] > caps[1024]


def test_bad_max_num_seqs_is_refused():
    with pytest.raises(ValueError, match="max_num_seqs"):
        _oss().kv_capacity_tokens(0.9, 0)


def test_a_replica_with_no_kv_memory_is_refused_with_a_clear_error():
    """gpt-oss-120b on one H100 under vLLM V0's sorting sampler at 1,024 sequences: the sampler's
    7.8 GB leave nothing (vLLM itself fails to start so, vllm-project/vllm#23278)."""
    rc = ReplicaConfig(model="gpt-oss-120b", gpu="h100-80gb", quantization="mxfp4", batch_cap=1024,
                       engine_profile="vllm-v0")
    with pytest.raises(ValueError, match="KV capacity of 0 tokens.*lower batch_cap"):
        Cluster(ClusterConfig(replica=rc, num_replicas=1))
    ok = Cluster(ClusterConfig(replica=ReplicaConfig(model="gpt-oss-120b", gpu="h100-80gb", quantization="mxfp4",
                                                     batch_cap=64, engine_profile="vllm-v0"), num_replicas=1))
    assert ok.replicas[0].kv.capacity_blocks > 0
