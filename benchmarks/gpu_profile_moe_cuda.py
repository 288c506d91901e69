"""Torch backend of ``benchmarks/gpu_profile_moe.py``: a MoE layer through grouped GEMMs, FP8 GEMMs.

On a CUDA GPU every row is timed as ``gpu_profile_cuda.timeit_graph`` times per-op rows (20 calls in
one CUDA graph, median of 7 replays). ``device='cpu'`` runs the same code with a wall-clock timer:
it checks the code paths (tests compare the layer with a per-expert loop), its times mean nothing.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
FP8_ALIGN = 16
"""Rows per expert group are padded to this for the FP8 grouped GEMM (its kernel needs groups of
16-row multiples); BF16 groups are not padded."""


def route(logits: torch.Tensor, top_k: int, experts: int, align: int):
    """Top-k routing -> (weights (n*k,) in the sorted order, token of each sorted pair, destination row
    of each sorted pair in the padded grouped layout, group end offsets (experts,) int32).

    Capturable in a CUDA graph (no host synchronisation): the pairs are sorted by expert, each
    expert's rows start at the padded cumulative count of the experts before it."""
    p = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(p, top_k, dim=-1)
    w = w / w.sum(dim=-1, keepdim=True)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    counts = torch.zeros(experts, dtype=torch.int64, device=logits.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + align - 1) // align * align
    start = torch.cumsum(counts, 0) - counts
    pstart = torch.cumsum(padded, 0) - padded
    rank = torch.arange(flat.numel(), device=logits.device) - start[sorted_e]
    dest = pstart[sorted_e] + rank
    offs = torch.cumsum(padded, 0).to(torch.int32)
    return w.reshape(-1)[order], order // top_k, dest, offs


def experts_bf16(xp: torch.Tensor, w1t: torch.Tensor, w2t: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """gate+up grouped GEMM, SiLU*mul, down grouped GEMM on rows grouped by expert."""
    h = torch._grouped_mm(xp, w1t, offs=offs)
    n = h.shape[-1] // 2
    return torch._grouped_mm(F.silu(h[:, :n]) * h[:, n:], w2t, offs=offs)


def _quant_rows(x: torch.Tensor):
    s = x.abs().amax(dim=-1).float().clamp(min=1e-6) / FP8_MAX
    return (x.float() / s[:, None]).to(FP8), s


def experts_fp8(xp, w1q_t, s1, w2q_t, s2, offs) -> torch.Tensor:
    """The FP8 path: per-token activation quantization, rowwise-scaled grouped GEMMs."""
    xq, sx = _quant_rows(xp)
    h = torch._scaled_grouped_mm(xq, w1q_t, sx, s1, offs=offs, out_dtype=BF16, use_fast_accum=True)
    n = h.shape[-1] // 2
    aq, sa = _quant_rows(F.silu(h[:, :n]) * h[:, n:])
    return torch._scaled_grouped_mm(aq, w2q_t, sa, s2, offs=offs, out_dtype=BF16, use_fast_accum=True)


def experts_fp8_gemm(xq, sx, w1q_t, s1, w2q_t, s2, aq, sa, offs) -> torch.Tensor:
    """The FP8 grouped GEMMs alone (inputs already quantized; the SiLU*mul between them in BF16)."""
    h = torch._scaled_grouped_mm(xq, w1q_t, sx, s1, offs=offs, out_dtype=BF16, use_fast_accum=True)
    n = h.shape[-1] // 2
    F.silu(h[:, :n]) * h[:, n:]  # timed, not used: the second GEMM reads the pre-quantized ``aq``
    return torch._scaled_grouped_mm(aq, w2q_t, sa, s2, offs=offs, out_dtype=BF16, use_fast_accum=True)


def moe_layer(x, wr, w1t, w2t, top_k: int, rows: int) -> torch.Tensor:
    """A whole MoE layer in BF16 (router, top-k, sort, gather, grouped GEMMs, weighted sum).
    ``rows`` = ``n * top_k`` (static shapes for graph capture)."""
    experts = wr.shape[1]
    w, tok, dest, offs = route(x @ wr, top_k, experts, 1)
    xp = torch.empty(rows, x.shape[1], dtype=x.dtype, device=x.device)
    xp[dest] = x[tok]
    y = experts_bf16(xp, w1t, w2t, offs)
    out = torch.zeros_like(x)
    return out.index_add_(0, tok, y[dest] * w[:, None].to(y.dtype))


def moe_layer_reference(x, wr, w1t, w2t, top_k: int) -> torch.Tensor:
    """The same layer as a loop over tokens and their experts (for the tests)."""
    p = torch.softmax((x @ wr).float(), dim=-1)
    w, ids = torch.topk(p, top_k, dim=-1)
    w = w / w.sum(dim=-1, keepdim=True)
    out = torch.zeros(x.shape, dtype=torch.float32)
    n = w1t.shape[-1] // 2
    for t in range(x.shape[0]):
        for j in range(top_k):
            e = int(ids[t, j])
            h = (x[t:t + 1] @ w1t[e]).float()
            a = (F.silu(h[:, :n]) * h[:, n:]).to(x.dtype)
            out[t] += float(w[t, j]) * (a @ w2t[e]).float()[0]
    return out


class MoEBackend:
    """``backend(row) -> seconds`` for the rows of ``gpu_profile_moe.plan``."""

    def __init__(self, device: str, moe_shapes: dict) -> None:
        """``moe_shapes``: name -> (experts, hidden, expert intermediate, top-k), as ``gpu_profile_moe.MOE_SHAPES``."""
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("benchmarks/gpu_profile_moe.py needs a CUDA GPU and PyTorch built with CUDA; "
                               f"torch {torch.__version__} sees none (use --device cpu to check the code paths)")
        self.dev, self.shapes = device, moe_shapes
        self.gen = torch.Generator(device=device).manual_seed(0)
        self._weights: dict = {}

    def info(self) -> dict:
        out = {"device": self.dev, "torch": torch.__version__}
        if self.dev.startswith("cuda"):
            from gpu_profile_cuda import _copy_ceiling_tbps, _gemm_ceiling_tflops

            out.update(device=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                       capability=list(torch.cuda.get_device_capability()),
                       bf16_tflops_8k=_gemm_ceiling_tflops(self.dev), copy_tbytes_per_s_rw=_copy_ceiling_tbps(self.dev),
                       memory_bytes=torch.cuda.get_device_properties(0).total_memory)
        return out

    def _time(self, fn) -> float:
        if self.dev.startswith("cuda"):
            from gpu_profile_cuda import timeit_graph

            return timeit_graph(fn)
        fn()
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[1]

    def _randn(self, *shape, scale=0.02):
        return (torch.randn(*shape, generator=self.gen, device=self.dev) * scale).to(BF16)

    def moe_weights(self, shape: str):
        """BF16 (E, K, 2N) and (E, N, K) column-major expert weights, their FP8 copies and the router."""
        if shape not in self._weights:
            self._weights.clear()  # one shape's weights at a time
            e, k, n, _ = self.shapes[shape]
            w1 = self._randn(e, 2 * n, k)  # physical (E, 2N, K): column-major (E, K, 2N) view
            w2 = self._randn(e, k, n)
            wr = self._randn(k, e)
            q = {}
            for name, w in (("1", w1), ("2", w2)):
                s = w.abs().amax(dim=-1).float().clamp(min=1e-6) / FP8_MAX  # (E, out)
                q[name] = ((w.float() / s[..., None]).to(FP8).transpose(-2, -1), s)
            self._weights[shape] = (w1.transpose(-2, -1), w2.transpose(-2, -1), wr, q)
        return self._weights[shape]

    @torch.inference_mode()
    def __call__(self, row: dict) -> float:
        op, n = row["op"], row["n_tokens"]
        if op == "gemm":
            return self._gemm(row["k"], row["n"], n, row["dtype"])
        e, k_hidden, _, top_k = self.shapes[row["shape"]]
        w1t, w2t, wr, q = self.moe_weights(row["shape"])
        x = self._randn(n, k_hidden, scale=1.0)
        if op == "moe_layer":
            return self._time(lambda: moe_layer(x, wr, w1t, w2t, top_k, n * top_k))
        if op != "moe_experts":
            raise ValueError(f"unknown op {op!r}; expected moe_experts, moe_layer or gemm")
        align = FP8_ALIGN if row["dtype"].startswith("fp8") else 1
        logits = torch.randn(n, e, generator=self.gen, device=self.dev)
        _, tok, dest, offs = route(logits, top_k, e, align)
        rows = int(offs[-1])
        xp = torch.zeros(rows, k_hidden, dtype=BF16, device=self.dev)
        xp[dest] = x[tok]
        if row["dtype"] == "bf16":
            return self._time(lambda: experts_bf16(xp, w1t, w2t, offs))
        (w1q, s1), (w2q, s2) = q["1"], q["2"]
        if row["dtype"] == "fp8-gemm":
            xq, sx = _quant_rows(xp)
            aq, sa = _quant_rows(self._randn(rows, w2q.shape[1], scale=1.0))
            return self._time(lambda: experts_fp8_gemm(xq, sx, w1q, s1, w2q, s2, aq, sa, offs))
        return self._time(lambda: experts_fp8(xp, w1q, s1, w2q, s2, offs))

    def _gemm(self, k: int, n_out: int, m: int, dtype: str) -> float:
        w = self._randn(n_out, k)  # physical (N, K): the (K, N) operand column-major, as cuBLAS wants
        if dtype == "bf16":
            x = self._randn(m, k, scale=1.0)
            return self._time(lambda: x @ w.t())
        mp = (m + 15) // 16 * 16  # FP8 GEMMs take 16-row multiples
        xq = self._randn(mp, k, scale=1.0).to(FP8)
        wq = w.to(FP8)
        one = torch.ones((), device=self.dev)
        return self._time(lambda: torch._scaled_mm(xq, wq.t(), scale_a=one, scale_b=one, out_dtype=BF16))

