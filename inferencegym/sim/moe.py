"""Mixture-of-experts layers in the execution-time model (``ExecutionModel`` builds one ``MoECost``).

One MoE layer on the slowest GPU of a replica of ``tensor_parallel x expert_parallel`` GPUs, for an
iteration of ``n`` batched tokens (the whole replica's):

* **router** (gating) GEMM ``hidden x experts`` in FP16 on each data-parallel rank's tokens;
* **shared experts** (DeepSeek): a dense gated MLP on every token of the rank, split by TP;
* **routed experts**: each token goes to ``experts_per_token`` experts. Without expert parallelism
  (``expert_parallel = 1``) every GPU holds every expert, split by TP, and computes all ``n * k``
  token-expert pairs; with it (``expert_parallel = E``) the ``tp * E`` GPUs each hold
  ``experts / (tp * E)`` whole experts and compute ``n * k / (tp * E)`` pairs times the **load
  imbalance** (max over mean tokens per GPU, from a published measurement, see
  :func:`gpu_imbalance`). The grouped GEMMs read the weights of the experts that received at least
  one token, ``experts_on_gpu * (1 - (1 - k/experts)**n)`` of them in expectation, and are timed by
  the calibrated GEMM roofline (``floor + ((F/P)^p + (M/BW)^p)^(1/p)``);
* **the fused-MoE kernels' fixed time** (:data:`MOE_LAYER_FIXED_S`, plus
  :data:`MOE_FP8_ACT_QUANT_FIXED_S` with FP8 activations): besides the two grouped GEMMs
  and the activation, a MoE layer runs the top-k softmax, the sort of the token-expert pairs by
  expert (``moe_align_block_size``) and the sum of each token's k outputs: small dependent kernels
  whose latency sets a 1-token layer's time (fitted on published measured layers, see the constant);
* **all-to-all** dispatch and combine with expert parallelism: each GPU sends its tokens' hidden
  states to the GPUs of their experts and gets the results back, ``tokens x k x (G-1)/G x hidden``
  bytes each way (dispatch in FP8 when the tier is FP8, as DeepEP does, combine in BF16), over
  NVLink inside a node (G <= 8) or the per-GPU InfiniBand link beyond (one network copy per remote
  node the token's experts span, at most ``routing_node_limit`` nodes for DeepSeek's node-limited
  routing; NVLink forwarding inside the node is not charged), at the bandwidth efficiencies DeepEP
  measured, plus the GPU's calibrated collective latency per transfer. No overlap of the
  all-to-all with computation (SGLang's two-batch overlap, vLLM's dual-batch overlap) is modelled.

Attention runs data-parallel across the ``expert_parallel`` ranks (DeepSeek-style DP attention:
each rank holds the whole attention, split by TP inside the rank, and its own sequences' KV).
"""

from __future__ import annotations

import math

from inferencegym.sim.presets import GPUPreset, ModelPreset

IMBALANCE_MEASURED = 1.069
"""Median max/mean tokens per expert-parallel rank without EPLB, 16 ranks (vLLM pull request
#50647, Kimi K3 on GSM8K: balancedness 0.9356; 1.008 with EPLB)."""
IMBALANCE_MEASURED_RANKS = 16
A2A_NVLINK_EFFICIENCY = 153.0 / 200.0
"""DeepEP normal kernels, intranode EP8 on H800: dispatch 153 GB/s of NVLink's 200 GB/s per
direction (deepseek-ai/DeepEP docs/legacy.md)."""
A2A_RDMA_EFFICIENCY = 43.0 / 50.0
"""DeepEP normal kernels, internode EP16: 43 GB/s of a 400 Gb/s (50 GB/s) CX7 NIC."""
ACT_BYTES = 2.0
MOE_KERNEL_COMPUTE_EFFICIENCY = {"triton": 0.45, "deepgemm": 1.0, "cutlass": 0.809}
"""Compute efficiency of the routed experts' grouped GEMMs relative to the calibrated dense GEMM
efficiency of the ``vllm-v1`` stage (each GPU's fit of today's GEMMs), by kernel family
(``ModelPreset.moe_kernel``). ``triton``: fitted by ``python -m inferencegym.sim.calibration.moe_fit``
on a published measured MoE layer (vLLM's ``benchmark_moe.py`` on one H200, BF16, 128 experts top-8,
tuned configs, compute-bound rows: vLLM pull request #44818; 0.449 with the layer's fixed time
:data:`MOE_LAYER_FIXED_S`) and checked out of sample on others (H100: gpt-oss-120b's shape in BF16,
#39902, within 10 %; Qwen3-30B-A3B FP8, #24700): Triton's fused MoE gathers scattered token rows per
expert and runs far below a dense GEMM. ``deepgemm``: DeepSeek's grouped GEMMs run at dense-GEMM
efficiency (1.0, the DeepSeek-V3 rows of ``docs/bench/models_memory.md``). ``cutlass``: the CUTLASS
grouped GEMMs PyTorch runs on Hopper (``torch._grouped_mm``; vLLM's ``cutlass_moe`` path is of the
same family), fitted with :data:`MOE_KERNEL_STREAM_BYTES_PER_SM_CYCLE` and :data:`MOE_KERNEL_TILE_K0`
by ``python -m inferencegym.sim.calibration.moe_gpu_fit`` on every BF16 row (1-8,192 tokens) of four
MoE shapes measured on one H100 (``inferencegym/data/moe_profiles/h100-80gb.json``) and checked on
the same kernels measured on an H200 (``h200-141gb.json``, five shapes): 0.808 before, as the only
figure, against the 2024 ``kernel-only`` H100 fit, which predicted 0.64-0.99 of the H200's times."""

MOE_KERNEL_FP8_FACTOR = {"triton": 0.316, "deepgemm": 1.0, "cutlass": 0.792}
"""Fraction of the FP8 tier's compute speed-up (``presets.FP8_COMPUTE_EFFICIENCY``, fitted on dense
H200 GEMMs) that a kernel family's FP8 grouped GEMMs reach, multiplying its grouped efficiency under an
FP8 tier. Fitted by ``python -m inferencegym.sim.calibration.moe_gpu_fit`` on compute-bound rows
(>= 1,024 tokens, the ``vllm-v1`` GEMM stage): ``triton`` on vLLM pull request #24700 (Qwen3-30B-A3B
FP8 W8A8 on H100, ``benchmark_moe.py``; 0.355 against the 2024 H100 fit),
``cutlass`` on the measured H100 FP8 grouped GEMMs (``torch._scaled_grouped_mm``, rowwise scales);
``deepgemm``: DeepSeek's FP8 GEMMs at the dense FP8 efficiency (no measurement here)."""


MOE_LAYER_FIXED_S = 11.4e-6
"""Fixed time of one MoE layer beyond the modelled kernel floors of its two grouped GEMMs and its
activation: routing top-k, the token sort by expert, the top-k sum and the dependencies between them
(one GPU, any token count), BF16 activations. Fitted by ``python -m inferencegym.sim.calibration.moe_fit``
as the measured-minus-modelled time of the 1-token BF16 layer of gpt-oss-120b's shape on one H100
with tuned configs (85.24 us, vLLM pull request #39902; 200 MB of weights read), relative to the
``vllm-v1`` dense GEMM fit (today's measured H100 GEMMs). (15 us before, the median over this row and
the two FP8 rows below at the 2024 ``kernel-only`` fit; at today's fit those rows leave 24.7 and 29.0 us:
the FP8 path runs more kernels, :data:`MOE_FP8_ACT_QUANT_FIXED_S`.)"""

MOE_FP8_ACT_QUANT_FIXED_S = 15.5e-6
"""Extra fixed time of a MoE layer whose grouped GEMMs take FP8 activations (W8A8): the quantization of
the layer input and of the activation between the two GEMMs (two more dependent kernels per layer).
Fitted by ``moe_fit`` as the median excess over :data:`MOE_LAYER_FIXED_S` of the 1-token residuals of
two FP8 layers on one H100 (vLLM ``benchmark_moe.py``): Qwen3-Next-80B FP8 at TP4 (E=512, N=128,
top-10: 29.45 us measured, pull request #44830) and Qwen3-30B-A3B FP8 (44.54 us, #24700); residuals
24.7 / 29.0 us; 8-38 MB of FP8 weights, so the residual is the fixed part, not bandwidth."""


MXFP4_HOPPER_PAD = (256, 128)
"""Padding of MXFP4 expert weights on a GPU without FP4 tensor cores (Hopper): vLLM runs them with
the Marlin W4A16 MoE kernel ("Weight-only FP4 compression will be used leveraging the Marlin
kernel. This may degrade performance for compute-heavy workloads", ``marlin_utils_fp4.py``), which
needs every expert GEMM's n % 256 == 0 and k % 128 == 0, so ``Mxfp4MoEMethod.create_weights`` rounds
the hidden size up to a multiple of 256 and the expert intermediate size to one of 128 (vLLM
``model_executor/layers/quantization/mxfp4.py``). gpt-oss-120b: 2880 -> 3072 and 2880 -> 2944,
9 % more expert weights: 70.7 GB in all, against the 65.97 GiB (70.8 GB) vLLM logged loading it on
one H100 (vllm-project/vllm#23278, v0.10.1; the Triton backend of v0.14 logged 64.38 GiB, #33155).
The kernels stream and multiply the padded weights. (hidden, expert intermediate) multiples."""


MOE_KERNEL_STREAM_BYTES_PER_SM_CYCLE = {"triton": 0.0, "deepgemm": 0.0, "cutlass": 10.0}
"""Latency-bound weight stream of a kernel family's grouped GEMMs, bytes per SM per cycle (0: none,
the HBM roofline alone). A grouped GEMM whose groups have few rows streams each expert's weights
through one tile per SM with a bounded number of loads in flight, so its weight-bound time is set
by the SMs and their clock (``GPUPreset.sm_count`` x ``sm_clock_ghz``), not by the HBM: the H100 and
the H200 (same GH100 die, 132 SMs at 1.98 GHz; 3.35 vs 4.8 TB/s) run these rows within ~12 % of
each other. Enters the GEMM's smooth roofline as a third term, ``weights / (rate x min(1, tiles /
SMs))`` (a grouped GEMM with fewer tiles than SMs streams through the busy SMs only; tiles of
:data:`GROUPED_TILE_N` output columns). Fitted with the other figures of the family by
``python -m inferencegym.sim.calibration.moe_gpu_fit`` (cutlass) and ``moe_fit`` (triton)."""

MOE_KERNEL_TILE_K0 = {"triton": 0.0, "deepgemm": 0.0, "cutlass": 619.0}
"""Fixed cost of one output tile of a grouped GEMM (pipeline fill, epilogue, scattered stores), in
reduction elements: the compute time of a GEMM of reduction length ``K`` is multiplied by ``1 + K0/K``,
so short-K GEMMs (the down projection of a narrow tensor-parallel shard: Qwen3-30B-A3B at TP2,
K = 384) lose efficiency. Fitted with the family's other figures (see above)."""

GROUPED_TILE_N = 128
"""Output columns per tile of the grouped GEMMs (CUTLASS's and vLLM's tuned Triton configs at
Hopper batch sizes use 128-256; the occupancy term of the stream ceiling counts tiles of 128)."""


def moe_kernel_figures(kernel: str, fp8: bool = False) -> dict:
    """``MoECost`` keyword figures of kernel family ``kernel``: the grouped efficiency (with the FP8
    factor when ``fp8``), its weight-stream ceiling, its per-tile fixed cost and the layer's fixed
    time (with the FP8 activation quantization when ``fp8``)."""
    return {"grouped_compute_efficiency": moe_kernel_efficiency(kernel, fp8=fp8),
            "stream_bytes_per_sm_cycle": MOE_KERNEL_STREAM_BYTES_PER_SM_CYCLE[kernel],
            "tile_k0": MOE_KERNEL_TILE_K0[kernel],
            "fixed_s": MOE_LAYER_FIXED_S + (MOE_FP8_ACT_QUANT_FIXED_S if fp8 else 0.0)}


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def moe_kernel_efficiency(kernel: str, fp8: bool = False) -> float:
    """:data:`MOE_KERNEL_COMPUTE_EFFICIENCY` of ``kernel``, times :data:`MOE_KERNEL_FP8_FACTOR` when
    its grouped GEMMs run FP8 operands (ValueError listing the families)."""
    try:
        return MOE_KERNEL_COMPUTE_EFFICIENCY[kernel] * (MOE_KERNEL_FP8_FACTOR[kernel] if fp8 else 1.0)
    except KeyError:
        raise ValueError(f"unknown moe_kernel {kernel!r}; valid: "
                         f"{', '.join(MOE_KERNEL_COMPUTE_EFFICIENCY)}") from None


def dequant_weight_factor(*, instr_per_weight: float, weight_bytes: float, achieved_bytes_per_s: float,
                          instr_per_s: float) -> float:
    """Slow-down of the weight stream of a GEMM whose weights are upconverted on the CUDA cores.

    A kernel without tensor-core support for the weight format (MXFP4 on Hopper: W4A16) converts
    every weight element it loads into a BF16 operand, ``instr_per_weight`` CUDA-core instructions
    each, at the GPU's ``instr_per_s`` (FP32 lanes x clock). When that work does not overlap the
    loads, the time per weight is ``weight_bytes / achieved_bytes_per_s + instr_per_weight /
    instr_per_s``, i.e. the memory time times ``1 + instr_per_weight * achieved_bytes_per_s /
    (weight_bytes * instr_per_s)``. In the compute-bound regime the same work is the tier's
    ``gemm_compute_overhead``. 1.0 when no conversion is needed.
    """
    if instr_per_weight <= 0.0:
        return 1.0
    return 1.0 + instr_per_weight * achieved_bytes_per_s / (weight_bytes * instr_per_s)


def gpu_imbalance(ranks: int) -> float:
    """Max over mean routed tokens per GPU across ``ranks`` expert-parallel GPUs: 1 on one GPU,
    the published 1.069 at 16 ranks, growing with log2(ranks) in between and beyond."""
    if ranks <= 1:
        return 1.0
    return 1.0 + (IMBALANCE_MEASURED - 1.0) * math.log2(ranks) / math.log2(IMBALANCE_MEASURED_RANKS)


class MoECost:
    """Per-layer time and per-GPU weights of one MoE layer (see the module docstring)."""

    def __init__(self, *, model: ModelPreset, gpu: GPUPreset, tensor_parallel: int,
                 expert_parallel: int, weight_bytes: float, act_in_bytes: float, inv_c: float,
                 inv_c_fp16: float, inv_m: float, gemm_p: float, gemm_floor_s: float,
                 act_eff_mem: float, elem_floor_s: float, a2a_latency_s: float,
                 weight_time_factor: float = 1.0, grouped_compute_efficiency: float = 1.0,
                 pad_to: tuple[int, int] = (1, 1), stream_bytes_per_sm_cycle: float = 0.0,
                 tile_k0: float = 0.0, fixed_s: float = MOE_LAYER_FIXED_S) -> None:
        self._kw = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        m, t, ep = model, int(tensor_parallel), int(expert_parallel)
        h, E, k = m.hidden_size, m.num_experts, m.experts_per_token
        h_x = _round_up(h, pad_to[0])  # the routed experts' hidden size as the kernel stores it
        self.k, self.E = k, E
        self.dp = ep
        self.gpus = t * ep
        self.p, self.ip, self.floor = gemm_p, 1.0 / gemm_p, gemm_floor_s
        if ep > 1:
            if E % self.gpus:
                raise ValueError(f"{m.name} has {E} experts, not divisible by the {self.gpus} GPUs of "
                                 f"tensor_parallel={t} x expert_parallel={ep}")
            self.experts_gpu = E // self.gpus
            f = m.moe_ffn_size
            self.pair_share = gpu_imbalance(self.gpus) / self.gpus
        else:
            self.experts_gpu = E
            f = m.moe_ffn_size // t
            self.pair_share = 1.0
        f_x = _round_up(f, pad_to[1])
        # fused-MoE workspace per routed token-expert pair (vLLM ``fused_experts``: the gate-up output
        # and the down output share one buffer of max(2f, h), the activation output f; BF16)
        self.workspace_per_pair = (max(2 * f_x, h_x) + f_x) * ACT_BYTES
        # routed experts: per pair (FLOPs and activation bytes) and per active expert (weights,
        # slowed by an in-kernel dequantisation that does not overlap the loads, see
        # :func:`dequant_weight_factor`)
        w_inv_m = inv_m * weight_time_factor
        self.grouped_compute_efficiency = float(grouped_compute_efficiency)
        self.stream_bytes_per_sm_cycle, self.tile_k0 = float(stream_bytes_per_sm_cycle), float(tile_k0)
        g_inv_c = inv_c / grouped_compute_efficiency
        # the latency-bound weight stream (MOE_KERNEL_STREAM_BYTES_PER_SM_CYCLE): seconds per active
        # expert's weights at full occupancy, and the active experts that fill every SM with tiles
        stream = stream_bytes_per_sm_cycle * gpu.sm_count * gpu.sm_clock_ghz * 1e9
        inv_s = 1.0 / stream if stream > 0 else 0.0
        sms = gpu.sm_count
        self.up = self._terms(2.0 * h_x * 2 * f_x * g_inv_c * (1.0 + tile_k0 / h_x), h_x * 2 * f_x * weight_bytes,
                              w_inv_m, (h * act_in_bytes + 2 * f * ACT_BYTES) * inv_m, inv_s,
                              sms / -(-2 * f_x // GROUPED_TILE_N))
        self.down = self._terms(2.0 * f_x * h_x * g_inv_c * (1.0 + tile_k0 / f_x), f_x * h_x * weight_bytes,
                                w_inv_m, (f * act_in_bytes + h * ACT_BYTES) * inv_m, inv_s,
                                sms / -(-h_x // GROUPED_TILE_N))
        self.act_per_pair = 3 * f * ACT_BYTES / (gpu.mem_gbytes_per_s * 1e9 * act_eff_mem)
        self.elem_floor = elem_floor_s
        self.fixed = float(fixed_s)
        # router (FP16) and shared experts (dense, split by TP inside the rank)
        self.router = (2.0 * h * E * inv_c_fp16, h * E * ACT_BYTES * inv_m, (h + 2 * E) * ACT_BYTES * inv_m, 0.0, 0.0)
        fs = m.num_shared_experts * m.moe_ffn_size // t
        self.shared = fs > 0
        self.sh_up = (2.0 * h * 2 * fs * inv_c, h * 2 * fs * weight_bytes * w_inv_m,
                      (h * act_in_bytes + 2 * fs * ACT_BYTES) * inv_m, 0.0, 0.0)
        self.sh_down = (2.0 * fs * h * inv_c, fs * h * weight_bytes * w_inv_m,
                        (fs * act_in_bytes + h * ACT_BYTES) * inv_m, 0.0, 0.0)
        self.sh_act = 3 * fs * ACT_BYTES / (gpu.mem_gbytes_per_s * 1e9 * act_eff_mem)
        # all-to-all (expert parallelism only)
        G = self.gpus
        if ep > 1:
            disp = 1.0 if act_in_bytes == 1.0 else ACT_BYTES
            if G <= 8:  # one NVLink node
                copies = k * (G - 1) / G
                link = gpu.intra_node_gbytes_per_s * A2A_NVLINK_EFFICIENCY * 1e9
            else:  # across nodes of 8 GPUs: one network copy per remote node the token's experts span
                nodes = G / 8
                span = min(k, m.routing_node_limit or k, nodes)
                copies = span * (nodes - 1) / nodes
                link = gpu.inter_node_gbytes_per_s * A2A_RDMA_EFFICIENCY * 1e9
            self.a2a_per_token = copies * h * (disp + ACT_BYTES) / G / link
            self.a2a_lat = 2.0 * a2a_latency_s
        else:
            self.a2a_per_token = 0.0
            self.a2a_lat = 0.0
        # weights per GPU of one MoE layer (parameters, and bytes at the tier)
        self.weight_bytes_gpu = (self.experts_gpu * 3 * h_x * f_x * weight_bytes
                                 + 3 * h * fs * weight_bytes + h * E * ACT_BYTES)

    def workspace_bytes(self, n_tokens: int) -> float:
        """GPU memory of the fused-MoE intermediate buffers for an iteration of ``n_tokens`` (the
        engine's profiling run allocates them at its largest batch, ahead of the KV cache)."""
        return n_tokens * self.k * self.pair_share * self.workspace_per_pair

    @staticmethod
    def _terms(flop_time: float, weight_bytes: float, w_inv_m: float, act_time: float, inv_stream: float,
               fill_experts: float) -> tuple[float, float, float, float, float]:
        """One grouped GEMM's coefficients: compute seconds per pair, weight seconds per active
        expert (HBM), activation seconds per pair, weight seconds per active expert at the
        latency-bound stream (0: none), and the active experts whose tiles fill every SM."""
        return (flop_time, weight_bytes * w_inv_m, act_time, weight_bytes * inv_stream, fill_experts)

    def _gemm(self, terms: tuple[float, float, float, float, float], pairs: float, active: float) -> float:
        fc, wt, at, ws, fill = terms
        tc = fc * pairs
        tm = wt * active + at * pairs
        if ws == 0.0:
            return self.floor + (tc**self.p + tm**self.p) ** self.ip
        tg = ws * max(active, fill)  # fewer tiles than SMs: the busy SMs' stream sets the time
        return self.floor + (tc**self.p + tm**self.p + tg**self.p) ** self.ip

    def retuned(self, **kernel) -> MoECost:
        """The same layer with other kernel-family figures (``grouped_compute_efficiency``,
        ``stream_bytes_per_sm_cycle``, ``tile_k0``): what the fits vary."""
        return MoECost(**{**self._kw, **kernel})

    def experts_time_s(self, n_tokens: int, fixed_s: float | None = None) -> float:
        """The routed experts of one layer (two grouped GEMMs, the activation, the fused kernels'
        fixed time, ``fixed_s`` or the layer's own): what ``benchmark_moe.py`` times."""
        pairs = n_tokens * self.k * self.pair_share
        active = self.experts_gpu * (1.0 - (1.0 - self.k / self.E) ** n_tokens)
        return (self._gemm(self.up, pairs, active) + self._gemm(self.down, pairs, active) + self.elem_floor
                + (self.fixed if fixed_s is None else fixed_s) + self.act_per_pair * pairs)

    def a2a_time_s(self, n_tokens: int) -> float:
        """Dispatch + combine of one layer for ``n_tokens`` tokens of the replica (0 without EP)."""
        if self.a2a_lat == 0.0 or n_tokens <= 0:
            return 0.0
        return self.a2a_lat + self.a2a_per_token * n_tokens

    def layer_time_s(self, n_tokens: int) -> float:
        """Router + shared + routed experts + all-to-all of one MoE layer, ``n_tokens`` in all."""
        if n_tokens <= 0:
            return 0.0
        n_rank = -(-n_tokens // self.dp)
        t = self._gemm(self.router, n_rank, 1.0) + self.experts_time_s(n_tokens)
        if self.shared:
            t += self._gemm(self.sh_up, n_rank, 1.0) + self._gemm(self.sh_down, n_rank, 1.0)
            t += self.elem_floor + self.sh_act * n_rank
        return t + self.a2a_time_s(n_tokens)
