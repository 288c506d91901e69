"""GPU, model and quantization presets for the execution-time model.

Every figure comes from a public spec sheet or model config (sources in ``docs/techniques.md`` and
``docs/calibration.md``). Presets are frozen keyword-only dataclasses; registries raise
``ValueError`` listing the valid names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GIB = 1024**3
GB = 1e9


@dataclass(frozen=True, kw_only=True)
class GPUPreset:
    """One GPU type (one device, dense tensor-core peaks, no sparsity)."""

    name: str
    """Registry name, e.g. ``"a100-80gb"``."""
    fp16_tflops: float
    """Dense FP16/BF16 tensor-core peak, TFLOP/s."""
    int8_tops: float
    """Dense INT8 tensor-core peak, TOP/s (used by W8A8 GEMMs)."""
    mem_gbytes_per_s: float
    """HBM/GDDR bandwidth, GB/s (1e9 bytes)."""
    memory_gbytes: float
    """Device memory, GB as sold (80 GB cards hold 80 GiB = 85.9e9 bytes; see ``memory_bytes``)."""
    memory_bytes: float
    """Device memory in bytes."""
    intra_node_gbytes_per_s: float
    """GPU-to-GPU link bandwidth per direction, GB/s (NVLink, or PCIe when there is none)."""
    inter_node_gbytes_per_s: float
    """Per-GPU network bandwidth to another node, GB/s (default link for KV transfer)."""
    gpu_hour_usd: float
    """On-demand price of one GPU for one hour, USD (representative list price; see docs)."""
    network_profile: str
    """Calibration key of the all-reduce profile (Vidur network profile family)."""
    calibrated: bool
    """True when kernel efficiencies were fitted on measured profiles of this GPU."""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class ModelPreset:
    """A decoder-only Llama-style transformer (RMSNorm, RoPE, SwiGLU MLP, GQA)."""

    name: str
    """Registry name, e.g. ``"llama-2-7b"``."""
    num_layers: int
    """Transformer blocks."""
    hidden_size: int
    """Model width (embedding dimension)."""
    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (GQA when smaller than ``num_heads``)."""
    ffn_size: int
    """MLP intermediate size (gate and up projections each map hidden -> ffn)."""
    vocab_size: int
    """Vocabulary (embedding rows and LM-head columns)."""
    tied_embeddings: bool = False
    """True when the LM head reuses the embedding matrix (no separate weights)."""
    gated_mlp: bool = True
    """SwiGLU MLP (gate and up projections); False for a plain two-GEMM GELU MLP (BLOOM)."""
    draft_model: str | None = None
    """Default draft model preset for speculative decoding (same tokenizer), or None."""
    hf_id: str = ""
    """Hugging Face id of the public config the numbers come from."""

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def layer_linear_params(self) -> int:
        """Parameters of the four GEMMs of one layer (QKV, O, gate+up, down)."""
        h, d = self.hidden_size, self.head_dim
        qkv = h * (self.num_heads + 2 * self.num_kv_heads) * d
        o = self.num_heads * d * h
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn_size
        return qkv + o + mlp

    @property
    def num_params(self) -> int:
        """Total parameters (linear layers, norms, embeddings and LM head)."""
        per_layer = self.layer_linear_params + 2 * self.hidden_size
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tied_embeddings else emb
        return self.num_layers * per_layer + emb + head + self.hidden_size

    def to_dict(self) -> dict:
        d = asdict(self)
        d["num_params"] = self.num_params
        return d


@dataclass(frozen=True, kw_only=True)
class QuantizationTier:
    """A weight (and maybe activation) quantization scheme and its cost/quality figures."""

    name: str
    """``fp16``, ``int8`` or ``int4``."""
    weight_bytes_per_param: float
    """Bytes per linear-layer weight, including group scales/zeros."""
    int8_compute: bool
    """True for W8A8 (GEMMs run on INT8 tensor cores at ``GPUPreset.int8_tops``)."""
    gemm_compute_overhead: float
    """Multiplier (>= 1) on the compute-bound GEMM time (dequantisation in weight-only kernels)."""
    activation_quant_ops: int
    """Extra bandwidth passes over the activations per layer (per-token activation quantisation)."""
    quality_delta: float
    """Quality cost: Llama-2 WikiText-2 perplexity increase vs FP16 (published, see docs)."""
    description: str
    """One-line summary."""

    def to_dict(self) -> dict:
        return asdict(self)


_GPUS: dict[str, GPUPreset] = {
    # NVIDIA A100 SXM4 80GB datasheet: 312 TF FP16 dense, 624 TOPS INT8 dense, 2,039 GB/s HBM2e,
    # NVLink 3 600 GB/s total (300 GB/s per direction); DGX A100: 200 Gb/s HDR IB per GPU.
    "a100-80gb": GPUPreset(
        name="a100-80gb", fp16_tflops=312.0, int8_tops=624.0, mem_gbytes_per_s=2039.0,
        memory_gbytes=80.0, memory_bytes=80 * GIB, intra_node_gbytes_per_s=300.0,
        inter_node_gbytes_per_s=25.0, gpu_hour_usd=1.79, network_profile="a100",
        calibrated=True),
    # NVIDIA H100 SXM5 80GB datasheet: 989 TF FP16 dense, 1,979 TOPS INT8 dense, 3.35 TB/s HBM3,
    # NVLink 4 900 GB/s total (450 per direction); DGX H100: 400 Gb/s NDR IB per GPU.
    "h100-80gb": GPUPreset(
        name="h100-80gb", fp16_tflops=989.4, int8_tops=1978.9, mem_gbytes_per_s=3350.0,
        memory_gbytes=80.0, memory_bytes=80 * GIB, intra_node_gbytes_per_s=450.0,
        inter_node_gbytes_per_s=50.0, gpu_hour_usd=2.99, network_profile="h100",
        calibrated=True),
    # NVIDIA H200 SXM 141GB datasheet: the H100 SXM's GH100 compute (989 TF FP16 dense, 1,979 TOPS
    # INT8 dense) with 141 GB of HBM3e at 4.8 TB/s; NVLink 4 (900 GB/s total), same NVSwitch network
    # as DGX H100. The device reports ~140 GiB (torch total_memory 139.7 GiB on the profiled H200).
    # Price: midpoint of the specialty-cloud on-demand range of May 2026 ($3.50-4.50 per GPU-hour).
    "h200-141gb": GPUPreset(
        name="h200-141gb", fp16_tflops=989.4, int8_tops=1978.9, mem_gbytes_per_s=4800.0,
        memory_gbytes=141.0, memory_bytes=140 * GIB, intra_node_gbytes_per_s=450.0,
        inter_node_gbytes_per_s=50.0, gpu_hour_usd=4.00, network_profile="h100",
        calibrated=True),
    # NVIDIA A10 datasheet (the A10G of AWS g5 is the same GA102 part): 125 TF FP16 dense,
    # 250 TOPS INT8 dense, 600 GB/s GDDR6, 24 GB, PCIe Gen4 x16 (~32 GB/s per direction).
    "a10g-24gb": GPUPreset(
        name="a10g-24gb", fp16_tflops=125.0, int8_tops=250.0, mem_gbytes_per_s=600.0,
        memory_gbytes=24.0, memory_bytes=24 * GIB, intra_node_gbytes_per_s=32.0,
        inter_node_gbytes_per_s=12.5, gpu_hour_usd=1.006, network_profile="pcie",
        calibrated=False),
    # NVIDIA L40S datasheet: 362 TF FP16 dense, 733 TOPS INT8 dense, 864 GB/s GDDR6, 48 GB,
    # PCIe Gen4 x16, no NVLink.
    "l40s-48gb": GPUPreset(
        name="l40s-48gb", fp16_tflops=362.0, int8_tops=733.0, mem_gbytes_per_s=864.0,
        memory_gbytes=48.0, memory_bytes=48 * GIB, intra_node_gbytes_per_s=32.0,
        inter_node_gbytes_per_s=25.0, gpu_hour_usd=1.861, network_profile="pcie",
        calibrated=False),
}

_MODELS: dict[str, ModelPreset] = {
    "llama-2-7b": ModelPreset(
        name="llama-2-7b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=32,
        ffn_size=11008, vocab_size=32000, draft_model="tinyllama-1.1b",
        hf_id="meta-llama/Llama-2-7b-hf"),
    "llama-2-13b": ModelPreset(
        name="llama-2-13b", num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40,
        ffn_size=13824, vocab_size=32000, draft_model="tinyllama-1.1b",
        hf_id="meta-llama/Llama-2-13b-hf"),
    "llama-2-70b": ModelPreset(
        name="llama-2-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
        ffn_size=28672, vocab_size=32000, draft_model="tinyllama-1.1b",
        hf_id="meta-llama/Llama-2-70b-hf"),
    "llama-3-8b": ModelPreset(
        name="llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
        ffn_size=14336, vocab_size=128256, draft_model="llama-3.2-1b",
        hf_id="meta-llama/Meta-Llama-3-8B"),
    "llama-3-70b": ModelPreset(
        name="llama-3-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
        ffn_size=28672, vocab_size=128256, draft_model="llama-3.2-1b",
        hf_id="meta-llama/Meta-Llama-3-70B"),
    "codellama-34b": ModelPreset(
        name="codellama-34b", num_layers=48, hidden_size=8192, num_heads=64, num_kv_heads=8,
        ffn_size=22016, vocab_size=32000, draft_model="tinyllama-1.1b",
        hf_id="codellama/CodeLlama-34b-hf"),
    # Draft models for speculative decoding (same tokenizers as their targets).
    "tinyllama-1.1b": ModelPreset(
        name="tinyllama-1.1b", num_layers=22, hidden_size=2048, num_heads=32, num_kv_heads=4,
        ffn_size=5632, vocab_size=32000, hf_id="TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"),
    "llama-3.2-1b": ModelPreset(
        name="llama-3.2-1b", num_layers=16, hidden_size=2048, num_heads=32, num_kv_heads=8,
        ffn_size=8192, vocab_size=128256, tied_embeddings=True, hf_id="meta-llama/Llama-3.2-1B"),
    # Used to fit the engine overhead on SplitwiseSim's measured times (not a Llama: plain GELU MLP,
    # ALiBi, MHA). bigscience/bloom config: 70 layers, 14336 hidden, 112 heads, vocab 250880.
    "bloom-176b": ModelPreset(
        name="bloom-176b", num_layers=70, hidden_size=14336, num_heads=112, num_kv_heads=112,
        ffn_size=4 * 14336, vocab_size=250880, tied_embeddings=True, gated_mlp=False,
        hf_id="bigscience/bloom"),
}

_QUANT: dict[str, QuantizationTier] = {
    "fp16": QuantizationTier(
        name="fp16", weight_bytes_per_param=2.0, int8_compute=False, gemm_compute_overhead=1.0,
        activation_quant_ops=0, quality_delta=0.0,
        description="FP16/BF16 weights and activations (reference)."),
    # SmoothQuant W8A8 (Xiao et al., ICML 2023): Llama-2 WikiText-2 perplexity +~0.05-0.1.
    "int8": QuantizationTier(
        name="int8", weight_bytes_per_param=1.0, int8_compute=True, gemm_compute_overhead=1.0,
        activation_quant_ops=2, quality_delta=0.07,
        description="W8A8 (SmoothQuant-style): 1-byte weights, INT8 tensor-core GEMMs."),
    # AWQ/GPTQ W4A16 g128 (Lin et al., MLSys 2024): Llama-2-7B WikiText-2 5.47 -> 5.60 (AWQ),
    # 5.69 (GPTQ); 13B 4.88 -> 4.97; 70B 3.32 -> 3.41. We take ~+0.15.
    "int4": QuantizationTier(
        name="int4", weight_bytes_per_param=0.5 + 4.0 / 128.0, int8_compute=False,
        gemm_compute_overhead=1.15, activation_quant_ops=0, quality_delta=0.15,
        description="W4A16 weight-only (AWQ/GPTQ-style, group 128): dequantised in the GEMM."),
}


def _lookup(registry: dict, name: str, kind: str):
    try:
        return registry[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))}") from None


def register_gpu(preset: GPUPreset, *, replace: bool = False) -> GPUPreset:
    """Add a GPU preset (e.g. one fitted by ``inferencegym calibrate --profile``). Refuses to
    shadow an existing name unless ``replace=True``."""
    if not isinstance(preset, GPUPreset):
        raise TypeError(f"expected a GPUPreset, got {type(preset).__name__}")
    if preset.name in _GPUS and not replace and _GPUS[preset.name] != preset:
        raise ValueError(f"gpu preset {preset.name!r} already exists; choose another name or pass replace=True")
    _GPUS[preset.name] = preset
    return preset


def get_gpu(name: str) -> GPUPreset:
    """The GPU preset called ``name`` (ValueError listing valid names otherwise)."""
    return _lookup(_GPUS, name, "gpu")


def get_model(name: str) -> ModelPreset:
    """The model preset called ``name`` (ValueError listing valid names otherwise)."""
    return _lookup(_MODELS, name, "model")


def get_quantization(name: str) -> QuantizationTier:
    """The quantization tier called ``name`` (ValueError listing valid names otherwise)."""
    return _lookup(_QUANT, name, "quantization")


def list_gpus() -> list[str]:
    return sorted(_GPUS)


def list_models(include_drafts: bool = True) -> list[str]:
    if include_drafts:
        return sorted(_MODELS)
    drafts = {m.draft_model for m in _MODELS.values() if m.draft_model}
    return sorted(n for n in _MODELS if n not in drafts)


def list_quantizations() -> list[str]:
    return list(_QUANT)
