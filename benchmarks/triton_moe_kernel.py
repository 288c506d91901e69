"""A Triton fused-MoE expert path in the style of vLLM's ``fused_moe`` (written here, not copied).

What vLLM's Triton MoE does, and this module does the same way (so its times stand for vLLM's
kernel family on a GPU without vLLM installed):

1. **align** (:func:`align_block`, vLLM ``moe_align_block_size``): the ``n * top_k`` token-expert
   pairs are sorted by expert and each expert's run is padded to a multiple of ``BLOCK_SIZE_M`` with
   a sentinel id (``n * top_k``), so every ``BLOCK_SIZE_M`` block of the sorted list belongs to one
   expert; one expert id per block. Here in PyTorch ops (vLLM runs one CUDA kernel), CUDA-graph
   capturable: no host synchronisation, static sizes (``n * top_k + experts * (BLOCK_SIZE_M - 1)``);
2. **gate+up GEMM** (:func:`moe_gemm`, one launch of :func:`_moe_gemm_kernel`): a grid of
   ``BLOCK_SIZE_M x BLOCK_SIZE_N`` output tiles over the padded pair list, grouped along M
   (``GROUP_SIZE_M``) for L2 reuse; each tile gathers its ``BLOCK_SIZE_M`` token rows of the
   activations (row ``pair // top_k``: scattered rows), loads its expert's weight tile and
   accumulates ``tl.dot`` over K in FP32; tiles past the padded length exit at once; the output
   row of each pair is written in the pair's original position (``(n, top_k, 2N)``);
3. SiLU(gate) * up (PyTorch here; vLLM: one fused CUDA kernel);
4. **down GEMM**: the same kernel over the ``n * top_k`` activation rows (``top_k = 1``: each pair
   is its own row), multiplying each output row by the token's routing weight;
5. the sum of each token's ``top_k`` outputs (vLLM ``moe_sum``).

Tile configurations (``BLOCK_SIZE_*``, ``GROUP_SIZE_M``, ``num_warps``, ``num_stages``) are vLLM's
tuned ones for the shape and GPU (``fused_moe/configs/E=128,N=...,device_name=NVIDIA_H200.json``),
picked as vLLM picks them: the entry whose batch key is nearest to the token count.
Runs under ``TRITON_INTERPRET=1`` on a CPU in FP16 (the interpreter mishandles BF16); the ``check`` row
of ``gpu_triton_moe.py`` compares it with a per-token loop (:func:`reference`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


def align_block(topk_ids: torch.Tensor, block_m: int, experts: int):
    """Pairs sorted by expert, padded per expert to ``block_m`` -> (sorted pair ids (P,), expert id
    of each block (P // block_m,), number of padded rows (1,) int32). ``P`` is the static bound
    ``n*k + experts*(block_m-1)`` rounded up to ``block_m``; sentinel id ``n*k`` marks padding."""
    flat = topk_ids.reshape(-1).to(torch.int64)
    numel = flat.numel()
    dev = flat.device
    counts = torch.zeros(experts, dtype=torch.int64, device=dev)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    pstart = ends - padded
    start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    rank = torch.arange(numel, device=dev) - start[sorted_e]
    dest = pstart[sorted_e] + rank
    cap = -(-(numel + experts * (block_m - 1)) // block_m) * block_m
    sorted_ids = torch.full((cap,), numel, dtype=torch.int32, device=dev)
    sorted_ids[dest] = order.to(torch.int32)
    block_start = torch.arange(0, cap, block_m, device=dev)
    expert_ids = torch.searchsorted(ends, block_start, right=True).clamp_(max=experts - 1).to(torch.int32)
    return sorted_ids, expert_ids, ends[-1:].to(torch.int32)


@triton.jit
def _moe_gemm_kernel(a_ptr, b_ptr, c_ptr, w_ptr, sorted_ids_ptr, expert_ids_ptr, n_padded_ptr,
                     N, K, EM, num_valid, TOP_K, stride_am, stride_ak, stride_be, stride_bn, stride_bk,
                     stride_cm, stride_cn,
                     BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                     GROUP_SIZE_M: tl.constexpr, MUL_WEIGHT: tl.constexpr):
    """C[pair] = A[pair // TOP_K] @ B[expert]^T for the pairs of one (BLOCK_SIZE_M, BLOCK_SIZE_N) tile."""
    pid = tl.program_id(axis=0)
    tiles_m = tl.cdiv(EM, BLOCK_SIZE_M)
    tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
    per_group = GROUP_SIZE_M * tiles_n
    first_m = (pid // per_group) * GROUP_SIZE_M
    rows_in_group = min(tiles_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    if pid_m * BLOCK_SIZE_M >= tl.load(n_padded_ptr):
        return
    offs_pair = tl.load(sorted_ids_ptr + pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)).to(tl.int64)
    valid = offs_pair < num_valid
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N).to(tl.int64)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_rows = a_ptr + (offs_pair // TOP_K)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_cols = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        left = K - kb * BLOCK_SIZE_K
        a = tl.load(a_rows, mask=valid[:, None] & (offs_k[None, :] < left), other=0.0)
        b = tl.load(b_cols, mask=offs_k[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc=acc)
        a_rows += BLOCK_SIZE_K * stride_ak
        b_cols += BLOCK_SIZE_K * stride_bk
    if MUL_WEIGHT:
        acc = acc * tl.load(w_ptr + offs_pair, mask=valid, other=0.0)[:, None]
    out_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c = c_ptr + offs_pair[:, None] * stride_cm + out_n[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & (out_n[None, :] < N))


def moe_gemm(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, sorted_ids, expert_ids, n_padded,
             top_k: int, cfg: dict, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``out[pair] = a[pair // top_k] @ w[expert(pair)].T`` (times ``weights[pair]`` if given).
    ``a`` (rows, K), ``w`` (E, N, K) as vLLM stores expert weights, ``out`` (pairs, N)."""
    E, N, K = w.shape
    EM = sorted_ids.numel()
    bm, bn = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"]
    grid = (triton.cdiv(EM, bm) * triton.cdiv(N, bn),)
    _moe_gemm_kernel[grid](
        a, w, out, weights if weights is not None else a, sorted_ids, expert_ids, n_padded,
        N, K, EM, out.shape[0], top_k, a.stride(0), a.stride(1), w.stride(0), w.stride(1), w.stride(2),
        out.stride(0), out.stride(1),
        BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=cfg["BLOCK_SIZE_K"], GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
        MUL_WEIGHT=weights is not None, num_warps=cfg.get("num_warps", 4),
        num_stages=cfg.get("num_stages", 2))
    return out


class FusedExperts:
    """Buffers and launches of one MoE layer's routed experts for fixed ``(n, top_k)`` routing."""

    def __init__(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_w: torch.Tensor,
                 topk_ids: torch.Tensor, cfg: dict) -> None:
        """``x`` (n, K); ``w1`` (E, 2N, K) gate rows then up rows; ``w2`` (E, K, N); ``topk_*`` (n, top_k)."""
        self.x, self.w1, self.w2, self.cfg = x, w1, w2, cfg
        self.n, self.k = topk_ids.shape
        self.E = w1.shape[0]
        self.topk_ids = topk_ids
        self.topk_w = topk_w.reshape(-1).float().contiguous()
        pairs, n2, kh = self.n * self.k, w1.shape[1], x.shape[1]
        self.c1 = torch.empty(pairs, n2, dtype=x.dtype, device=x.device)
        self.c2 = torch.empty(pairs, n2 // 2, dtype=x.dtype, device=x.device)
        self.c3 = torch.empty(pairs, kh, dtype=x.dtype, device=x.device)
        self.route = align_block(topk_ids, cfg["BLOCK_SIZE_M"], self.E)

    def align(self):
        self.route = align_block(self.topk_ids, self.cfg["BLOCK_SIZE_M"], self.E)
        return self.route

    def gemm1(self):
        return moe_gemm(self.x, self.w1, self.c1, *self.route, self.k, self.cfg)

    def act(self):
        h = self.c1.shape[1] // 2
        torch.mul(F.silu(self.c1[:, :h]), self.c1[:, h:], out=self.c2)
        return self.c2

    def gemm2(self):
        return moe_gemm(self.c2, self.w2, self.c3, *self.route, 1, self.cfg, weights=self.topk_w)

    def reduce(self):
        return self.c3.view(self.n, self.k, -1).sum(dim=1)

    def __call__(self):
        """The whole path: align, gate+up, SiLU*mul, down (weighted), top-k sum -> (n, K)."""
        self.align()
        self.gemm1()
        self.act()
        self.gemm2()
        return self.reduce()


def reference(x, w1, w2, topk_w, topk_ids) -> torch.Tensor:
    """The same layer as a loop over tokens and their experts, in FP32 (for the tests)."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    h = w1.shape[1] // 2
    for t in range(x.shape[0]):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[t, j])
            g = x[t].float() @ w1[e].float().T
            a = (F.silu(g[:h]) * g[h:]).to(x.dtype).float()
            out[t] += float(topk_w[t, j]) * (a @ w2[e].float().T)
    return out


def nearest_config(table: dict, n_tokens: int) -> dict:
    """vLLM's choice: the tuned entry whose batch-size key is nearest to ``n_tokens``."""
    return table[min(table, key=lambda m: abs(int(m) - n_tokens))]
