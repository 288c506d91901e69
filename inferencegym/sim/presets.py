"""GPU, model and quantization presets for the execution-time model.

Every figure comes from a public spec sheet or model config (sources in ``docs/techniques.md`` and
``docs/calibration.md``). Presets are frozen keyword-only dataclasses; registries raise
``ValueError`` listing the valid names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GIB = 1024**3
GB = 1e9
FP8_COMPUTE_EFFICIENCY = 0.887
"""FP8 GEMM compute efficiency relative to the FP16 fit (fitted, see ``calibration.fp8_fit``)."""


@dataclass(frozen=True, kw_only=True)
class GPUPreset:
    """One GPU type (one device, dense tensor-core peaks, no sparsity)."""

    name: str
    """Registry name, e.g. ``"a100-80gb"``."""
    fp16_tflops: float
    """Dense FP16/BF16 tensor-core peak, TFLOP/s."""
    int8_tops: float
    """Dense INT8 tensor-core peak, TOP/s (used by W8A8 GEMMs)."""
    fp8_tflops: float = 0.0
    """Dense FP8 tensor-core peak, TFLOP/s (0: no FP8 tensor cores, e.g. Ampere; FP8 refused)."""
    fp4_tflops: float = 0.0
    """Dense FP4 tensor-core peak, TFLOP/s (Blackwell: MXFP4 operands natively); 0: no FP4 tensor
    cores, so MXFP4 weights are dequantised to BF16 on the CUDA cores inside the GEMM (Hopper)."""
    cuda_core_tflops: float = 0.0
    """Non-tensor FP32 peak, TFLOP/s (datasheet; one FMA = 2 FLOPs): the CUDA-core instruction rate
    (``cuda_core_tflops / 2`` per second) that dequantises microscaled weights in the kernel."""
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
    sm_count: int = 0
    """Streaming multiprocessors (datasheet; 0: unknown). With ``sm_clock_ghz``, the SM cycles per second
    that bound a latency-limited weight stream (the grouped MoE GEMMs, ``moe.MOE_KERNEL_STREAM_BYTES_PER_SM_CYCLE``);
    0 leaves that bound out."""
    sm_clock_ghz: float = 0.0
    """SM boost clock, GHz (datasheet; 0: unknown)."""
    host_link_gb_s: float = 25.0
    """Host-to-GPU bandwidth per direction, GB/s, that one large copy from pinned host memory reaches
    (the PCIe link: ~25 on Gen4 x16, ~55 on Gen5 x16); the CPU tier of the KV cache moves blocks over it
    (``cpu_kv.py``; ``ReplicaConfig.cpu_kv_link_gb_s`` overrides it)."""

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
    head_dim_override: int = 0
    """Attention head dimension when it is not ``hidden_size // num_heads`` (Qwen3, gpt-oss; for
    MLA the no-RoPE query/key and value head dimension); 0: ``hidden_size // num_heads``."""
    num_experts: int = 0
    """Routed experts per MoE layer (0: a dense model)."""
    experts_per_token: int = 0
    """Routed experts each token is sent to (top-k)."""
    num_shared_experts: int = 0
    """Always-active shared experts per MoE layer (DeepSeek)."""
    moe_ffn_size: int = 0
    """Intermediate size of one expert (gated: gate and up each map hidden -> moe_ffn_size)."""
    dense_layers: int = 0
    """Leading layers with a dense MLP of ``ffn_size`` in a MoE model (DeepSeek ``first_k_dense_replace``)."""
    q_lora_rank: int = 0
    """MLA query compression rank (0: plain query projection)."""
    kv_lora_rank: int = 0
    """MLA key/value latent rank (0: not MLA); the KV cache holds this latent plus the RoPE key."""
    qk_rope_head_dim: int = 0
    """MLA decoupled RoPE key dimension (shared by all heads, cached beside the latent)."""
    moe_kernel: str = "triton"
    """Grouped-GEMM kernel family the serving engines run this checkpoint's experts with on Hopper:
    ``triton`` (vLLM/SGLang ``fused_moe`` and OpenAI's ``triton_kernels``: Qwen3, gpt-oss) or
    ``deepgemm`` (DeepSeek's FP8 block-scaled grouped GEMMs); sets the experts' compute efficiency
    (``moe.MOE_KERNEL_COMPUTE_EFFICIENCY``)."""
    routing_node_limit: int = 0
    """Node-limited routing: a token's experts span at most this many nodes (DeepSeek-V3
    ``topk_group`` 4), so it crosses the network at most this many times; 0: no limit."""
    sliding_window: int = 0
    """Tokens a sliding-window attention layer attends to (gpt-oss: 128); 0: every layer attends
    to the whole context (``sim/sliding_window.py``)."""
    sliding_window_layers: int = 0
    """Layers with sliding-window attention (gpt-oss: 18 of 36, alternating with full attention);
    their KV is held for the window only and their attention reads at most ``sliding_window`` keys."""

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden_size // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.num_layers - self.dense_layers if self.is_moe else 0

    @property
    def attn_linear_params(self) -> int:
        """Parameters of one layer's attention projections (QKV or MLA down/up, and O)."""
        h, d, nh = self.hidden_size, self.head_dim, self.num_heads
        if self.is_mla:
            r = self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * nh * (d + r)) if self.q_lora_rank \
                else h * nh * (d + r)
            kv = h * (self.kv_lora_rank + r) + self.kv_lora_rank * nh * 2 * d
            return q + kv + nh * d * h
        return h * (nh + 2 * self.num_kv_heads) * d + nh * d * h

    @property
    def expert_params(self) -> int:
        """Parameters of one expert (gated MLP of ``moe_ffn_size``)."""
        return 3 * self.hidden_size * self.moe_ffn_size

    @property
    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements per token and layer for the whole model (MLA: latent + RoPE key)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def layer_linear_params(self) -> int:
        """Parameters of the four GEMMs of one dense layer (QKV, O, gate+up, down)."""
        mlp = (3 if self.gated_mlp else 2) * self.hidden_size * self.ffn_size
        return self.attn_linear_params + mlp

    def _moe_layer_params(self, experts: int) -> int:
        router = self.hidden_size * self.num_experts
        return (self.attn_linear_params + router
                + (experts + self.num_shared_experts) * self.expert_params + 2 * self.hidden_size)

    def _params(self, experts: int) -> int:
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tied_embeddings else emb
        dense = self.num_layers - self.moe_layers
        return (dense * (self.layer_linear_params + 2 * self.hidden_size)
                + self.moe_layers * self._moe_layer_params(experts) + emb + head + self.hidden_size)

    @property
    def num_params(self) -> int:
        """Total parameters (linear layers, every expert, norms, embeddings and LM head)."""
        return self._params(self.num_experts)

    @property
    def active_params(self) -> int:
        """Parameters used per token (top-k routed + shared experts; = ``num_params`` if dense)."""
        return self._params(self.experts_per_token)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["num_params"] = self.num_params
        d["active_params"] = self.active_params
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
    fp8_compute: bool = False
    """True for FP8 W8A8 (GEMMs on FP8 tensor cores at ``GPUPreset.fp8_tflops``; needs Hopper/Ada+)."""
    experts_only: bool = False
    """True when the format covers the MoE expert weights only and attention, router, dense MLPs and
    embeddings stay BF16 (gpt-oss's MXFP4 checkpoints); refused on dense models."""
    dequant_instr_per_weight: float = 0.0
    """CUDA-core instructions per weight element to turn it into a tensor-core operand on a GPU
    without native support for the format (0: none needed)."""
    compute_efficiency: float = 1.0
    """Compute efficiency of this tier's GEMMs relative to the calibrated FP16 GEMM efficiency
    (FP8: fitted on the measured H200 BF16-vs-FP8 GEMM times, ``calibration.fp8_fit``)."""
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


H100_HOST_LINK_GB_S = 54.6
"""Host-to-GPU bandwidth of an H100 SXM's PCIe Gen5 x16 link, GB/s: one cudaMemcpyAsync of 16 MiB-1 GiB from
pinned memory, measured on a lent H100 80GB HBM3 (link Gen5 x16; median of the four sizes 54.4-54.9 GB/s;
device-to-host 55.0; `benchmarks/gpu_host_link.cu`, `benchmarks/results/gpu_h100_2026-11-26/host_link.json`,
fitted by `benchmarks/host_link_fit.py`)."""
H200_HOST_LINK_GB_S = 52.2
"""The same figure measured on a lent H200 (PCIe Gen5 x16, another host; device-to-host 55.1;
`benchmarks/results/gpu_h200_2026-11-26/host_link.json`)."""

_GPUS: dict[str, GPUPreset] = {
    # NVIDIA A100 SXM4 80GB datasheet: 312 TF FP16 dense, 624 TOPS INT8 dense, 2,039 GB/s HBM2e,
    # NVLink 3 600 GB/s total (300 GB/s per direction); DGX A100: 200 Gb/s HDR IB per GPU; 108 SMs at
    # 1,410 MHz boost (NVIDIA A100 Tensor Core GPU Architecture whitepaper).
    "a100-80gb": GPUPreset(
        name="a100-80gb", fp16_tflops=312.0, int8_tops=624.0,
        cuda_core_tflops=19.5, mem_gbytes_per_s=2039.0,
        memory_gbytes=80.0, memory_bytes=80 * GIB, intra_node_gbytes_per_s=300.0,
        inter_node_gbytes_per_s=25.0, gpu_hour_usd=1.79, network_profile="a100",
        calibrated=True, sm_count=108, sm_clock_ghz=1.41),
    # NVIDIA H100 SXM5 80GB datasheet: 989 TF FP16, 1,979 TOPS INT8, 1,979 TF FP8 dense, 3.35 TB/s HBM3,
    # NVLink 4 900 GB/s total (450 per direction); DGX H100: 400 Gb/s NDR IB per GPU; 132 SMs at 1,980 MHz
    # boost (NVIDIA H100 Tensor Core GPU Architecture whitepaper: 989 TF = 132 x 4 x 512 x 2 x 1.98 GHz). Memory: the total
    # the device reports to CUDA (what vLLM multiplies by gpu_memory_utilization), 85,017,493,504 B =
    # 79.18 GiB, measured with torch.cuda.mem_get_info on an H100 80GB HBM3 (benchmarks/results/
    # sampler_memory_h100.json; nvidia-smi: 81,559 MiB).
    "h100-80gb": GPUPreset(
        name="h100-80gb", fp16_tflops=989.4, int8_tops=1978.9, fp8_tflops=1978.9,
        cuda_core_tflops=66.9, mem_gbytes_per_s=3350.0,
        memory_gbytes=80.0, memory_bytes=85_017_493_504, intra_node_gbytes_per_s=450.0,
        inter_node_gbytes_per_s=50.0, gpu_hour_usd=2.99, network_profile="h100",
        calibrated=True, sm_count=132, sm_clock_ghz=1.98, host_link_gb_s=H100_HOST_LINK_GB_S),
    # NVIDIA H200 SXM 141GB datasheet: the H100 SXM's GH100 compute (989 TF FP16 dense, 1,979 TOPS
    # INT8 dense) with 141 GB of HBM3e at 4.8 TB/s; NVLink 4 (900 GB/s total), same NVSwitch network
    # as DGX H100. The device reports ~140 GiB (torch total_memory 139.7 GiB on the profiled H200).
    # Price: midpoint of the specialty-cloud on-demand range of May 2026 ($3.50-4.50 per GPU-hour).
    "h200-141gb": GPUPreset(
        name="h200-141gb", fp16_tflops=989.4, int8_tops=1978.9, fp8_tflops=1978.9,
        cuda_core_tflops=66.9, mem_gbytes_per_s=4800.0,
        memory_gbytes=141.0, memory_bytes=140 * GIB, intra_node_gbytes_per_s=450.0,
        inter_node_gbytes_per_s=50.0, gpu_hour_usd=4.00, network_profile="h100",
        calibrated=True, sm_count=132, sm_clock_ghz=1.98, host_link_gb_s=H200_HOST_LINK_GB_S),
    # NVIDIA A10 datasheet (the A10G of AWS g5 is the same GA102 part; 72 SMs, 1,695 MHz): 125 TF FP16 dense,
    # 250 TOPS INT8 dense, 600 GB/s GDDR6, 24 GB, PCIe Gen4 x16 (~32 GB/s per direction).
    "a10g-24gb": GPUPreset(
        name="a10g-24gb", fp16_tflops=125.0, int8_tops=250.0,
        cuda_core_tflops=31.2, mem_gbytes_per_s=600.0,
        memory_gbytes=24.0, memory_bytes=24 * GIB, intra_node_gbytes_per_s=32.0,
        inter_node_gbytes_per_s=12.5, gpu_hour_usd=1.006, network_profile="pcie",
        calibrated=False, sm_count=72, sm_clock_ghz=1.695),
    # NVIDIA L40S datasheet (142 SMs, 2,520 MHz boost): 362 TF FP16 dense, 733 TOPS INT8 / 733 TF FP8 dense (Ada), 864 GB/s GDDR6, 48 GB,
    # PCIe Gen4 x16, no NVLink.
    "l40s-48gb": GPUPreset(
        name="l40s-48gb", fp16_tflops=362.0, int8_tops=733.0, fp8_tflops=733.0,
        cuda_core_tflops=91.6, mem_gbytes_per_s=864.0,
        memory_gbytes=48.0, memory_bytes=48 * GIB, intra_node_gbytes_per_s=32.0,
        inter_node_gbytes_per_s=25.0, gpu_hour_usd=1.861, network_profile="pcie",
        calibrated=False, sm_count=142, sm_clock_ghz=2.52),
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
    # Mixtures of experts (architecture from the public Hugging Face config.json of each hf_id).
    # deepseek-ai/DeepSeek-V3: 61 layers (first_k_dense_replace 3 dense, intermediate 18432), hidden
    # 7168, 128 heads, MLA (q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128),
    # 256 routed experts (moe_intermediate_size 2048), 1 shared, top-8, vocab 129280: 671B total,
    # 37B active (DeepSeek-V3 technical report). The MTP module (speculation) is not modelled.
    "deepseek-v3": ModelPreset(
        name="deepseek-v3", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128,
        ffn_size=18432, vocab_size=129280, head_dim_override=128, num_experts=256,
        experts_per_token=8, num_shared_experts=1, moe_ffn_size=2048, dense_layers=3,
        q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, routing_node_limit=4,
        moe_kernel="deepgemm", hf_id="deepseek-ai/DeepSeek-V3"),
    # Qwen/Qwen3-30B-A3B: 48 layers, hidden 2048, 32 heads / 4 KV heads of head_dim 128, 128 experts
    # (moe_intermediate_size 768), top-8, no shared expert, vocab 151936: 30.5B total, 3.3B active.
    "qwen3-30b-a3b": ModelPreset(
        name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_heads=32, num_kv_heads=4,
        ffn_size=6144, vocab_size=151936, head_dim_override=128, num_experts=128,
        experts_per_token=8, moe_ffn_size=768, hf_id="Qwen/Qwen3-30B-A3B"),
    # openai/gpt-oss-120b: 36 layers, hidden 2880, 64 heads / 8 KV heads of head_dim 64, 128 experts
    # (intermediate_size 2880), top-4, vocab 201088: 116.8B total, 5.1B active (without the
    # embedding; model card). Experts ship in MXFP4 (quantization mxfp4); layer_types alternates
    # sliding_attention (sliding_window 128) and full_attention: 18 layers each; attention sinks.
    "gpt-oss-120b": ModelPreset(
        name="gpt-oss-120b", num_layers=36, hidden_size=2880, num_heads=64, num_kv_heads=8,
        ffn_size=2880, vocab_size=201088, head_dim_override=64, num_experts=128,
        experts_per_token=4, moe_ffn_size=2880, sliding_window=128, sliding_window_layers=18,
        hf_id="openai/gpt-oss-120b"),
    # Draft models for speculative decoding (same tokenizers as their targets).
    "tinyllama-1.1b": ModelPreset(
        name="tinyllama-1.1b", num_layers=22, hidden_size=2048, num_heads=32, num_kv_heads=4,
        ffn_size=5632, vocab_size=32000, hf_id="TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"),
    # turboderp/Qwama-0.5B-Instruct: Qwen2-0.5B-Instruct with Llama-3's vocabulary transplanted (the
    # draft of vLLM's Llama-3-70B speculative-decoding benchmarks, vllm-project/vllm#6964): 24 layers,
    # hidden 896, 14 heads / 2 KV heads, intermediate 4864, vocab 128256, tied embeddings.
    "qwama-0.5b": ModelPreset(
        name="qwama-0.5b", num_layers=24, hidden_size=896, num_heads=14, num_kv_heads=2,
        ffn_size=4864, vocab_size=128256, tied_embeddings=True, hf_id="turboderp/Qwama-0.5B-Instruct"),
    "llama-3.2-1b": ModelPreset(
        name="llama-3.2-1b", num_layers=16, hidden_size=2048, num_heads=32, num_kv_heads=8,
        ffn_size=8192, vocab_size=128256, tied_embeddings=True, hf_id="meta-llama/Llama-3.2-1B"),
    # meta-llama/Llama-3.2-3B config.json: 28 layers, hidden 3,072, 24 heads, 8 KV heads (head_dim 128),
    # intermediate 8,192, vocabulary 128,256, tied embeddings: 3.21B parameters, the dense model of
    # Qwen3-30B-A3B's active size (3.3B; the MoE speed budget's comparator).
    "llama-3.2-3b": ModelPreset(
        name="llama-3.2-3b", num_layers=28, hidden_size=3072, num_heads=24, num_kv_heads=8,
        ffn_size=8192, vocab_size=128256, tied_embeddings=True, hf_id="meta-llama/Llama-3.2-3B"),
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
    # FP8 e4m3 W8A8 (weights and activations, per-tensor scales). Quality: Kurtic et al., 2024
    # ("Give Me BF16 or Give Me Death"? Accuracy-Performance Trade-Offs in LLM Quantization, ACL
    # 2025) find W8A8-FP8 essentially lossless on Llama-3.1 (>= 99.9 % average recovery); the vLLM
    # FP8 docs report the same. We take +0.02 WikiText-2 perplexity, a fifth of INT8 W8A8.
    # compute_efficiency fitted by ``python -m inferencegym.sim.calibration.fp8_fit`` on the measured
    # H200 Llama-2-7B GEMMs (BF16 vs FP8, 1-4096 tokens; speed-up ratios 1.3-2.3x, median 1.77x).
    "fp8": QuantizationTier(
        name="fp8", weight_bytes_per_param=1.0, int8_compute=False, fp8_compute=True,
        compute_efficiency=FP8_COMPUTE_EFFICIENCY, gemm_compute_overhead=1.0,
        activation_quant_ops=1, quality_delta=0.02,
        description="FP8 e4m3 W8A8 (Hopper/Ada and later): 1-byte weights, FP8 tensor-core GEMMs."),
    "int4": QuantizationTier(
        name="int4", weight_bytes_per_param=0.5 + 4.0 / 128.0, int8_compute=False,
        gemm_compute_overhead=1.15, activation_quant_ops=0, quality_delta=0.15,
        description="W4A16 weight-only (AWQ/GPTQ-style, group 128): dequantised in the GEMM."),
    # MXFP4 (OCP Microscaling Formats v1.0): 4-bit E2M1 elements sharing one 8-bit E8M0 scale per
    # block of 32, 4 + 8/32 = 4.25 bits per weight; gpt-oss ships its MoE weights so ("quantized to
    # 4.25 bits per parameter", OpenAI gpt-oss model card, 2025), attention and embeddings in BF16.
    # On Hopper (no FP4 tensor-core operands: wgmma takes f16/bf16/tf32/e4m3/e5m2/s8, PTX ISA) the
    # kernel upconverts each weight to BF16 on the CUDA cores (W4A16): the memory-bound decode gains
    # the bytes, compute does not; see ``sim/moe.py`` for the dequantisation cost. On GPUs with FP4
    # tensor cores (``GPUPreset.fp4_tflops``, Blackwell) the weights feed the MMA directly with MXFP8
    # activations (W4A8 at the FP8 rate, no dequantisation). Quality: the released checkpoint is the
    # MXFP4 one (quantization-aware post-training), no BF16 reference is published: delta 0.
    "mxfp4": QuantizationTier(
        name="mxfp4", weight_bytes_per_param=4.25 / 8, int8_compute=False, experts_only=True,
        dequant_instr_per_weight=2.0, gemm_compute_overhead=1.15, activation_quant_ops=0,
        quality_delta=0.0,
        description="MXFP4 MoE experts (4.25 bits, gpt-oss), the rest BF16; dequantised in the kernel "
                    "on Hopper, native on FP4 tensor cores."),
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
