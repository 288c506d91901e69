"""Measure the times the execution-time model is calibrated on, on your GPU (PyTorch + CUDA).

    python benchmarks/gpu_profile.py --out my_gpu.json [--model llama-2-7b] [--quick]
    inferencegym calibrate --profile my_gpu.json --gpu my-gpu --fp16-tflops 989 \\
        --mem-gbytes-per-s 4800 --memory-gb 141 --out my_gpu_calibration.json

Writes the schema of the shared H200 file (``inferencegym.sim.calibration.reference.gpu_profile``):
``info`` (device, versions, measured bf16 GEMM and copy ceilings) and ``rows``, one per
measurement, with random bf16 weights (no downloads):

* per-op kernel times of one layer (median of 20 calls captured in one CUDA graph, launch overhead
  removed): the four GEMMs at 1-8192 tokens (``n_tokens``), causal prefill attention per chunk
  (``chunk``, ``context``; context > 0: the chunk's queries over cached keys, bottom-right causal)
  and decode attention (``batch``, ``context``);
* whole-model times (embedding to LM head): prefill of one prompt (``prompt_tokens``) and decode
  steps replayed from a CUDA graph (``batch``, ``context``).

Shapes come from the model presets (``inferencegym.sim.presets``), so any preset can be profiled.
The measuring loop takes a ``timer`` (``CudaBackend`` on a GPU); tests run it with a fake one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from inferencegym.sim.presets import get_model

GEMM_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
PREFILL_CHUNKS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREFILL_CONTEXT = ((128, 1024), (512, 1024), (2048, 1024), (128, 4096), (512, 4096), (2048, 4096),
                   (128, 16384), (512, 16384), (2048, 16384))
DECODE_BATCH = (1, 4, 16, 32, 64, 128, 256)
DECODE_CONTEXT = (256, 512, 1024, 2048, 4096)
MODEL_PROMPTS = (32, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
MODEL_DECODE = tuple((b, c) for b in (1, 8, 16, 32, 64, 128, 256) for c in (256, 1024, 2048, 4096))
QUICK = {"GEMM_TOKENS": (1, 32, 512, 4096), "PREFILL_CHUNKS": (256, 2048), "PREFILL_CONTEXT": ((512, 4096),),
         "DECODE_BATCH": (1, 64), "DECODE_CONTEXT": (1024,), "MODEL_PROMPTS": (512, 2048),
         "MODEL_DECODE": ((1, 1024), (64, 1024))}
KV_BUDGET_BYTES = 60e9
"""Decode points whose KV cache would exceed this are skipped."""


def plan(model: str, tp: int = 1, *, quick: bool = False, whole_model: bool = True) -> list[dict]:
    """The measurements to take, as rows without ``time_s`` (the file's keys, in order)."""
    mp = get_model(model)
    g = dict(GEMM_TOKENS=GEMM_TOKENS, PREFILL_CHUNKS=PREFILL_CHUNKS, PREFILL_CONTEXT=PREFILL_CONTEXT,
             DECODE_BATCH=DECODE_BATCH, DECODE_CONTEXT=DECODE_CONTEXT, MODEL_PROMPTS=MODEL_PROMPTS,
             MODEL_DECODE=MODEL_DECODE)
    if quick:
        g.update(QUICK)
    base = {"model": model, "tp": tp}
    rows = [{**base, "op": op, "n_tokens": n} for op in ("attn_pre_proj", "attn_post_proj",
                                                         "mlp_up_proj", "mlp_down_proj")
            for n in g["GEMM_TOKENS"]]
    rows += [{**base, "op": "attn_prefill", "chunk": n, "context": 0} for n in g["PREFILL_CHUNKS"]]
    rows += [{**base, "op": "attn_prefill", "chunk": n, "context": c} for n, c in g["PREFILL_CONTEXT"]]
    kv_heads = max(1, mp.num_kv_heads // tp)
    rows += [{**base, "op": "attn_decode", "batch": b, "context": c} for b in g["DECODE_BATCH"]
             for c in g["DECODE_CONTEXT"] if b * c * kv_heads <= 256 * 4096 * 8]
    if whole_model and tp == 1:
        kv_tok = 2 * mp.num_layers * mp.num_kv_heads * mp.head_dim * 2
        rows += [{**base, "op": "model_prefill", "prompt_tokens": n} for n in g["MODEL_PROMPTS"]]
        rows += [{**base, "op": "model_decode", "batch": b, "context": c} for b, c in g["MODEL_DECODE"]
                 if b * (c + 1) * kv_tok <= KV_BUDGET_BYTES]
    return rows


def measure(rows: list[dict], timer, progress=None) -> list[dict]:
    """``rows`` with ``time_s = timer(row)`` (seconds; a backend decides how to time each op)."""
    out = []
    for i, r in enumerate(rows):
        t = float(timer(r))
        if not t > 0:
            raise ValueError(f"timer returned {t!r} s for {r}; expected a positive time")
        out.append({**r, "time_s": t})
        if progress:
            progress(i + 1, len(rows), r)
    return out


def write_profile(path: Path, info: dict, rows: list[dict]) -> None:
    """Write ``{"info": ..., "rows": ...}`` (the schema ``reference.gpu_profile`` reads)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--model", default="llama-2-7b", help="model preset to profile [llama-2-7b]")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel shard to profile (per-op rows) [1]")
    ap.add_argument("--quick", action="store_true", help="a few points per op (smoke test)")
    a = ap.parse_args(argv)
    from gpu_profile_cuda import CudaBackend  # needs torch with CUDA

    t0 = time.time()
    backend = CudaBackend(a.model, a.tp)
    rows = plan(a.model, a.tp, quick=a.quick)
    done = measure(rows, backend, progress=lambda i, n, r: print(f"{i}/{n} {r['op']}", file=sys.stderr)
                   if i % 10 == 0 or i == n else None)
    info = {**backend.info(), "quick": a.quick, "wall_s": time.time() - t0,
            "command": "python benchmarks/gpu_profile.py " + " ".join(argv or sys.argv[1:])}
    write_profile(a.out, info, done)
    print(f"wrote {len(done)} rows to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
