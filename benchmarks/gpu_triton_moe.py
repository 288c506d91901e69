"""Time a vLLM-style Triton fused MoE (``triton_moe_kernel.py``) beside CUTLASS grouped GEMMs on one GPU.

    python benchmarks/gpu_triton_moe.py --out triton_moe.json            # on a CUDA GPU (~40 s)
    TRITON_INTERPRET=1 python benchmarks/gpu_triton_moe.py --device cpu --tiny --out /tmp/t.json

Decides where the Qwen3-30B-A3B H200 TP2 offline miss (+41 %, vLLM PR #44220, Triton MoE) comes
from: rows ``triton`` time the Triton path with vLLM's tuned H200 tile configs (nearest batch key, as
vLLM picks) per part (``align``, ``gemm1`` gate+up, ``act``, ``gemm2`` down, ``reduce``) and whole
(``total``); rows ``triton-default`` the same with vLLM's default config (no tuned file); rows
``cutlass`` the ``torch._grouped_mm`` experts of ``gpu_profile_moe.py`` on the same card. Shapes:
Qwen3-30B-A3B at TP1 (E=128, K=2048, N=768, top-8) and TP2 (N=384), and vLLM PR #44818's layer
(K=2816, N=704, top-8) whose published tuned Triton times fit ``MOE_KERNEL_COMPUTE_EFFICIENCY``.
Rows ``dense`` time the other per-layer parts of the offline run's 16,384-token prefill step at
Qwen3's TP2 shard (QKV and O GEMMs, router GEMM, causal attention of 16 x 1,024 tokens in PyTorch's
SDPA). A check row compares the Triton layer with a per-token loop (bf16, on the GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SHAPES = {  # name: (experts, hidden K, expert intermediate N (the shard), top-k); most wanted first
    "qwen3-30b-a3b-tp2": (128, 2048, 384, 8),
    "qwen3-30b-a3b": (128, 2048, 768, 8),
    "pr44818": (128, 2816, 704, 8),
}
TOKENS = (1, 8, 64, 256, 1024, 2048, 4096, 8192, 16384)
TINY = {"tiny": (8, 64, 32, 2)}
TINY_TOKENS = (3, 40)


def _c(m, n, k, g, w, s):
    return {"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": g, "num_warps": w,
            "num_stages": s}


TUNED_H200 = {
    # vLLM fused_moe/configs/E=128,N=<N>,device_name=NVIDIA_H200.json, the entries at these batch keys
    384: {1: _c(16, 128, 64, 1, 4, 5), 8: _c(16, 64, 128, 16, 4, 2), 64: _c(16, 128, 128, 16, 4, 4),
          256: _c(32, 128, 128, 32, 4, 2), 1024: _c(128, 256, 64, 16, 8, 4), 2048: _c(128, 256, 64, 1, 8, 4),
          4096: _c(128, 256, 64, 1, 8, 4)},
    768: {1: _c(16, 64, 64, 1, 4, 5), 8: _c(16, 64, 128, 1, 4, 3), 64: _c(16, 256, 128, 1, 8, 2),
          256: _c(32, 256, 128, 16, 4, 2), 1024: _c(128, 256, 64, 16, 8, 4), 2048: _c(128, 256, 64, 1, 8, 4),
          4096: _c(128, 256, 64, 16, 8, 4)},
    704: {1: _c(16, 256, 128, 1, 8, 2), 8: _c(16, 64, 128, 1, 4, 4), 64: _c(16, 128, 128, 1, 8, 4),
          256: _c(32, 64, 128, 16, 4, 4), 1024: _c(64, 128, 64, 1, 4, 3), 2048: _c(128, 256, 64, 1, 8, 4),
          4096: _c(128, 256, 64, 1, 8, 3)},
}
TINY_CONFIGS = {32: {1: _c(16, 16, 16, 1, 4, 2), 32: _c(16, 32, 32, 2, 4, 2)}}


def default_config(n_tokens: int, experts: int) -> dict:
    """vLLM's ``get_default_config`` for BF16 without a tuned file (small / large batch)."""
    return _c(16, 32, 64, 1, 4, 2) if n_tokens <= experts else _c(64, 64, 32, 8, 4, 2)


def _timer(dev: str):
    if dev.startswith("cuda"):
        from gpu_profile_cuda import timeit_graph

        return timeit_graph

    def wall(fn):
        fn()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return wall


def _routing(n: int, experts: int, top_k: int, gen, dev):
    logits = torch.randn(n, experts, generator=gen, device=dev)
    w, ids = torch.topk(torch.softmax(logits, -1), top_k, dim=-1)
    return w / w.sum(-1, keepdim=True), ids


def check(dev: str, shape: tuple, table: dict, gen) -> dict:
    """Max error of the Triton layer against a per-token loop (small n)."""
    from triton_moe_kernel import FusedExperts, nearest_config, reference

    e, k, n_, top = shape
    dt = torch.bfloat16 if dev.startswith("cuda") else torch.float16  # the interpreter mishandles bf16
    x = torch.randn(6, k, generator=gen, device=dev).to(dt)
    w1 = (torch.randn(e, 2 * n_, k, generator=gen, device=dev) * 0.05).to(dt)
    w2 = (torch.randn(e, k, n_, generator=gen, device=dev) * 0.05).to(dt)
    tw, ti = _routing(6, e, top, gen, dev)
    y = FusedExperts(x, w1, w2, tw, ti, nearest_config(table, 6))().float()
    r = reference(x, w1, w2, tw, ti)
    return {"op": "check", "max_abs_err": float((y - r).abs().max()), "ref_max_abs": float(r.abs().max())}


def moe_rows(dev: str, shapes: dict, tokens: tuple, tables: dict, gen, timer, log,
             deadline: float = float("inf")) -> list[dict]:
    from gpu_profile_moe_cuda import experts_bf16, route
    from triton_moe_kernel import FusedExperts, nearest_config

    dt = torch.bfloat16 if dev.startswith("cuda") else torch.float16
    rows = []
    for name, (e, k, n_, top) in shapes.items():
        w1 = (torch.randn(e, 2 * n_, k, generator=gen, device=dev) * 0.02).to(dt)  # (E, 2N, K)
        w2 = (torch.randn(e, k, n_, generator=gen, device=dev) * 0.02).to(dt)  # (E, K, N)
        for n in tokens:
            if time.time() > deadline:
                rows.append({"shape": name, "n_tokens": n, "error": "skipped: --budget-s reached"})
                continue
            x = torch.randn(n, k, generator=gen, device=dev).to(dt)
            tw, ti = _routing(n, e, top, gen, dev)
            base = {"shape": name, "n_tokens": n, "experts": e, "hidden": k, "inter": n_, "top_k": top}
            variants = [("triton", nearest_config(tables[n_], n))]
            if name.endswith("tp2") and n >= 1024 or not dev.startswith("cuda"):
                variants.append(("triton-default", default_config(n, e)))
            for kind, cfg in variants:
                fe = FusedExperts(x, w1, w2, tw, ti, cfg)
                for part in ("align", "gemm1", "act", "gemm2", "reduce", "total"):
                    fn = fe if part == "total" else getattr(fe, part)
                    try:
                        t = timer(fn)
                        rows.append({**base, "kernel": kind, "part": part, "config": cfg, "time_s": t})
                    except Exception as ex:  # noqa: BLE001 - one failing launch must not lose the rest
                        rows.append({**base, "kernel": kind, "part": part, "config": cfg,
                                     "error": f"{type(ex).__name__}: {str(ex)[:200]}"})
                    log(rows[-1])
                del fe
            if dev.startswith("cuda"):  # CUTLASS grouped GEMMs on the same rows (gpu_profile_moe's path)
                _, tok, dest, offs = route(torch.randn(n, e, generator=gen, device=dev), top, e, 1)
                xp = torch.zeros(n * top, k, dtype=dt, device=dev)
                xp[dest] = x[tok]
                w1t, w2t = w1.transpose(-2, -1), w2.transpose(-2, -1)
                rows.append({**base, "kernel": "cutlass", "part": "experts",
                             "time_s": timer(lambda: experts_bf16(xp, w1t, w2t, offs))})
                log(rows[-1])
        del w1, w2
    return rows


def dense_rows(dev: str, gen, timer, log) -> list[dict]:
    """Qwen3-30B-A3B TP2 attention side of a 16 x 1,024-token prefill step (one GPU's shard)."""
    dt = torch.bfloat16
    n, h, qh, kvh, d = 16384, 2048, 16, 2, 128
    x = torch.randn(n, h, generator=gen, device=dev).to(dt)
    rows = []
    for op, (kk, nn) in {"qkv": (h, (qh + 2 * kvh) * d), "o": (qh * d, h), "router": (h, 128)}.items():
        w = (torch.randn(nn, kk, generator=gen, device=dev) * 0.02).to(dt)
        a = x if kk == h else torch.randn(n, kk, generator=gen, device=dev).to(dt)
        rows.append({"kernel": "dense", "part": op, "n_tokens": n, "k": kk, "n": nn,
                     "time_s": timer(lambda: a @ w.t())})
        log(rows[-1])
    q = torch.randn(16, qh, 1024, d, generator=gen, device=dev).to(dt)
    kv = torch.randn(16, kvh, 1024, d, generator=gen, device=dev).to(dt)
    kr, vr = kv.repeat_interleave(qh // kvh, 1), kv.repeat_interleave(qh // kvh, 1)
    rows.append({"kernel": "dense", "part": "attn_prefill_sdpa", "n_tokens": n, "seqs": 16, "seq_len": 1024,
                 "q_heads": qh, "kv_heads": kvh,
                 "time_s": timer(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True))})
    log(rows[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--device", default="cuda", help="torch device [cuda]; cpu (with TRITON_INTERPRET=1): code check")
    ap.add_argument("--tiny", action="store_true", help="a tiny shape (the CPU code check)")
    ap.add_argument("--budget-s", type=float, default=75.0, help="skip MoE rows started after this many seconds [75]")
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_triton_moe.py needs a CUDA GPU (or --device cpu --tiny with TRITON_INTERPRET=1)", file=sys.stderr)
        return 2
    t0 = time.time()
    gen = torch.Generator(device=a.device).manual_seed(0)
    shapes, tokens, tables = (TINY, TINY_TOKENS, TINY_CONFIGS) if a.tiny else (SHAPES, TOKENS, TUNED_H200)
    timer = _timer(a.device)

    def log(r):
        print(f"{r.get('shape', '')} {r.get('n_tokens', '')} {r.get('kernel')} {r.get('part')}: "
              f"{r.get('time_s', r.get('error'))}", file=sys.stderr, flush=True)

    rows = [check(a.device, next(iter(shapes.values())), next(iter(tables.values())), gen)]
    print(f"check: {rows[0]}", file=sys.stderr, flush=True)
    if a.device.startswith("cuda") and not a.tiny:
        rows += dense_rows(a.device, gen, timer, log)
    rows += moe_rows(a.device, shapes, tokens, tables, gen, timer, log, deadline=t0 + a.budget_s)
    info = {"device": torch.cuda.get_device_name() if a.device.startswith("cuda") else a.device,
            "torch": torch.__version__, "triton": __import__("triton").__version__, "wall_s": time.time() - t0,
            "command": "python benchmarks/gpu_triton_moe.py " + " ".join(argv or sys.argv[1:])}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")
    tmp.replace(out)
    print(f"wrote {len(rows)} rows ({sum('error' in r for r in rows)} with errors) to {out} in {info['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
