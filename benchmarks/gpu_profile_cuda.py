"""CUDA timing backend of ``benchmarks/gpu_profile.py`` (needs PyTorch with a CUDA GPU).

Adapted from the tool that measured the shared H200 rows: per-op times are the median over 7
replays of a CUDA graph holding 20 calls (launch overhead removed); whole-model prefill is one
graph-captured forward, decode one graph-captured step. Random bf16 weights, no downloads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from inferencegym.sim.presets import get_model

DT = torch.bfloat16


def timeit(fn, reps=20, warm=3) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def timeit_graph(fn, inner=20, reps=7) -> float:
    """Kernel time of ``fn`` without launch overhead: ``inner`` calls captured in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    t = timeit(g.replay, reps=reps, warm=2) / inner
    del g
    return t


def _gemm_ceiling_tflops(dev) -> float:
    a = torch.randn(8192, 8192, device=dev, dtype=DT)
    b = torch.randn_like(a)
    return 2 * 8192**3 / timeit(lambda: a @ b, reps=10) / 1e12


def _copy_ceiling_tbps(dev) -> float:
    x = torch.empty(int(2e9), dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    return 2 * 2e9 / timeit(lambda: y.copy_(x), reps=10) / 1e12


class CudaBackend:
    """``backend(row) -> seconds`` for the rows of ``gpu_profile.plan`` of one model preset."""

    def __init__(self, model: str, tp: int = 1) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("benchmarks/gpu_profile.py needs a CUDA GPU and PyTorch built with CUDA; "
                               f"torch {torch.__version__} sees none")
        self.mp, self.tp, self.dev = get_model(model), tp, "cuda"
        self._llama = None

    def info(self) -> dict:
        """Device, versions and the measured ceilings (bf16 8192^3 GEMM, device copy read + write)."""
        return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
                "capability": list(torch.cuda.get_device_capability()),
                "bf16_tflops_8k": _gemm_ceiling_tflops(self.dev), "copy_tbytes_per_s_rw": _copy_ceiling_tbps(self.dev),
                "memory_bytes": torch.cuda.get_device_properties(0).total_memory}

    def _heads(self):
        m, tp = self.mp, self.tp
        return m.num_heads // tp, max(1, m.num_kv_heads // tp), m.head_dim

    @torch.inference_mode()
    def __call__(self, row: dict) -> float:
        op = row["op"]
        m, tp = self.mp, self.tp
        nh, nkv, d = self._heads()
        g = lambda *s: torch.randn(*s, device=self.dev, dtype=DT) * 0.02
        if op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"):
            k, n_out = {"attn_pre_proj": (m.hidden_size, (nh + 2 * nkv) * d),
                        "attn_post_proj": (nh * d, m.hidden_size),
                        "mlp_up_proj": (m.hidden_size, 2 * m.ffn_size // tp),
                        "mlp_down_proj": (m.ffn_size // tp, m.hidden_size)}[op]
            w, x = g(k, n_out), g(row["n_tokens"], k)
            return timeit_graph(lambda: x @ w)
        if op == "attn_prefill":
            n, c = row["chunk"], row["context"]
            q, kk = g(1, nh, n, d), g(1, nh, c + n, d)
            vv = torch.randn_like(kk)
            if c == 0:
                return timeit_graph(lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=True))
            bias = causal_lower_right(n, c + n)
            return timeit_graph(lambda: F.scaled_dot_product_attention(q, kk, vv, attn_mask=bias))
        if op == "attn_decode":
            b, c = row["batch"], row["context"]
            q, kk = g(b, nh, 1, d), g(b, nkv, c, d)
            vv = torch.randn_like(kk)
            return timeit_graph(lambda: F.scaled_dot_product_attention(q, kk, vv, enable_gqa=nkv != nh))
        if op == "model_prefill":
            llama = self._model()
            ids = torch.randint(0, m.vocab_size, (1, row["prompt_tokens"]), device=self.dev)
            return timeit_graph(lambda: llama.prefill(ids), inner=1, reps=7)
        if op == "model_decode":
            step, keep = self._model().decode_fn(row["batch"], row["context"])
            t = timeit_graph(step, inner=1, reps=15)
            del keep
            torch.cuda.empty_cache()
            return t
        raise ValueError(f"unknown op {op!r}")

    def _model(self):
        if self._llama is None:
            self._llama = Llama(self.mp, self.dev)
        return self._llama


class Llama:
    """A Llama forward pass (RMSNorm, RoPE, GQA, SwiGLU) with random weights, TP 1."""

    def __init__(self, mp, dev) -> None:
        self.mp, self.dev, self.d = mp, dev, mp.head_dim
        h, nh, nkv, d, ffn = mp.hidden_size, mp.num_heads, mp.num_kv_heads, mp.head_dim, mp.ffn_size
        g = lambda *s: torch.randn(*s, device=dev, dtype=DT) * 0.02
        self.emb, self.head = g(mp.vocab_size, h), g(h, mp.vocab_size)
        self.layers = [dict(qkv=g(h, (nh + 2 * nkv) * d), o=g(nh * d, h), up=g(h, 2 * ffn), down=g(ffn, h),
                            n1=torch.ones(h, device=dev, dtype=DT), n2=torch.ones(h, device=dev, dtype=DT))
                       for _ in range(mp.num_layers)]

    def rope(self, x, cos, sin):
        x1, x2 = x[..., : self.d // 2], x[..., self.d // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def _layer(self, x, L, cos, sin, kv=None, c=0):
        mp, d = self.mp, self.d
        b, n = x.shape[0], x.shape[1]
        y = F.rms_norm(x, (x.shape[-1],), L["n1"], 1e-5)
        q, k, v = (y @ L["qkv"]).split([mp.num_heads * d, mp.num_kv_heads * d, mp.num_kv_heads * d], dim=-1)
        q = self.rope(q.view(b, n, mp.num_heads, d).transpose(1, 2), cos, sin)
        k = self.rope(k.view(b, n, mp.num_kv_heads, d).transpose(1, 2), cos, sin)
        v = v.view(b, n, mp.num_kv_heads, d).transpose(1, 2)
        gqa = mp.num_kv_heads != mp.num_heads
        if kv is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            kv[0][:, :, c:c + 1] = k
            kv[1][:, :, c:c + 1] = v
            a = F.scaled_dot_product_attention(q, kv[0], kv[1], enable_gqa=gqa)
        x = x + a.transpose(1, 2).reshape(b, n, -1) @ L["o"]
        gt, up = (F.rms_norm(x, (x.shape[-1],), L["n2"], 1e-5) @ L["up"]).chunk(2, dim=-1)
        return x + (F.silu(gt) * up) @ L["down"]

    def _angles(self, pos):
        d = self.d
        inv = 1.0 / (10000 ** (torch.arange(0, d // 2, device=self.dev, dtype=torch.float32) / (d // 2)))
        ang = pos[:, None].float() * inv[None]
        return ang.cos().to(DT), ang.sin().to(DT)

    def prefill(self, ids):
        cos, sin = self._angles(torch.arange(ids.shape[1], device=self.dev))
        x = self.emb[ids]
        for L in self.layers:
            x = self._layer(x, L, cos, sin)
        return F.rms_norm(x[:, -1:], (x.shape[-1],), self.layers[0]["n1"], 1e-5) @ self.head

    def decode_fn(self, b, c):
        """A decode step of ``b`` sequences over ``c`` cached tokens each (KV written in place)."""
        mp, d = self.mp, self.d
        kvs = [(torch.randn(b, mp.num_kv_heads, c + 1, d, device=self.dev, dtype=DT),
                torch.randn(b, mp.num_kv_heads, c + 1, d, device=self.dev, dtype=DT)) for _ in self.layers]
        ids = torch.randint(0, mp.vocab_size, (b, 1), device=self.dev)
        cos, sin = self._angles(torch.tensor([c], device=self.dev))

        def step():
            x = self.emb[ids]
            for L, kv in zip(self.layers, kvs):
                x = self._layer(x, L, cos, sin, kv=kv, c=c)
            return F.rms_norm(x, (x.shape[-1],), self.layers[0]["n1"], 1e-5) @ self.head
        return step, kvs
