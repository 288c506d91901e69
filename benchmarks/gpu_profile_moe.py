"""Measure a mixture-of-experts layer and FP8 GEMMs on your GPU (PyTorch + CUDA), for the MoE and FP8 fits.

    python benchmarks/gpu_profile_moe.py --out moe_gpu.json [--quick]

Random weights, no downloads, one file in the schema of ``benchmarks/gpu_profile.py`` (``info`` and
``rows``, each row with ``time_s``, the median of 7 replays of a CUDA graph of 20 calls):

* ``moe_experts`` (``shape``, ``dtype``, ``n_tokens``): the routed experts of one MoE layer as a real
  MoE kernel path runs them: the token-expert pairs sorted by expert (groups padded to the kernel's
  alignment, as vLLM's ``moe_align_block_size`` pads), the gate+up grouped GEMM, SiLU*mul, the down
  grouped GEMM (``torch._grouped_mm`` in BF16; ``torch._scaled_grouped_mm`` in FP8 e4m3 with rowwise
  scales: ``fp8`` quantizes the activations per token inside the timed region with unfused PyTorch
  ops, ``fp8-gemm`` times the two FP8 grouped GEMMs and the SiLU*mul on pre-quantized inputs, the
  part a serving engine's fused kernels cannot shorten). Routing: top-k of uniform
  random router logits, fixed per row (what ``sim/moe.py`` assumes: each token picks k distinct experts);
* ``moe_layer`` (``shape``, ``n_tokens``, BF16): the whole layer: router GEMM, softmax top-k and
  renormalisation, the sort of the pairs by expert, gather, the two grouped GEMMs, the weighted sum
  of each token's k outputs (index_add): what :data:`inferencegym.sim.moe.MOE_LAYER_FIXED_S` models
  beyond the grouped GEMMs;
* ``gemm`` (``shape``, ``dtype``, ``n_tokens``): dense per-layer GEMMs ``x @ W`` of a model's TP shard
  in BF16 and FP8 e4m3 with per-tensor scales (``torch._scaled_mm``).

Shapes (``MOE_SHAPES``): Qwen3-30B-A3B and gpt-oss-120b (its BF16 shape) from the presets, the
shape of vLLM pull request #44818 whose published Triton timings ``calibration/moe_fit.py`` fits, so
the measured kernel path can be set beside the published one, Qwen3's TP2 shard (narrow N), and
Mixtral-8x7B's TP2 shard (the BLIS
vLLM-V1 H100 runs serve it at TP2). The fit of these rows is
``python -m inferencegym.sim.calibration.moe_gpu_fit``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

MOE_SHAPES = {
    # name: (experts, hidden K, expert intermediate N, top-k)
    "qwen3-30b-a3b": (128, 2048, 768, 8),
    "qwen3-30b-a3b-tp2": (128, 2048, 384, 8),
    "gpt-oss-120b": (128, 2880, 2880, 4),
    "pr44818": (128, 2816, 704, 8),
    "mixtral-8x7b-tp2": (8, 4096, 7168, 2),
}
MOE_LAYER_SHAPES = ("qwen3-30b-a3b", "gpt-oss-120b")
"""Shapes whose whole layer (routing included) is timed too."""
MOE_TOKENS = (1, 8, 32, 64, 256, 512, 1024, 2048, 4096, 8192)
GEMM_SHAPES = {
    # name: [(K, N)] of one layer's four GEMMs on one GPU (QKV, O, gate+up, down)
    "llama-2-7b": [(4096, 12288), (4096, 4096), (4096, 22016), (11008, 4096)],
    "llama-3-70b-tp4": [(8192, 2560), (2048, 8192), (8192, 14336), (7168, 8192)],
    "qwen3-30b-a3b-attn": [(2048, 5120), (4096, 2048)],
}
GEMM_TOKENS = (1, 8, 32, 128, 256, 512, 1024, 2048, 4096, 8192)
QUICK = {"MOE_TOKENS": (1, 256, 4096), "GEMM_TOKENS": (8, 2048)}
TINY_MOE_SHAPES = {"tiny": (8, 64, 32, 2)}
TINY_GEMM_SHAPES = {"tiny": [(64, 96)]}
"""``--tiny``: shapes small enough to check the code paths on a CPU."""


def plan(*, quick: bool = False, moe_shapes: dict = MOE_SHAPES, gemm_shapes: dict = GEMM_SHAPES) -> list[dict]:
    """The measurements to take, as rows without ``time_s``."""
    moe_tokens = QUICK["MOE_TOKENS"] if quick else MOE_TOKENS
    gemm_tokens = QUICK["GEMM_TOKENS"] if quick else GEMM_TOKENS
    rows = [{"op": "moe_experts", "shape": s, "dtype": dt, "n_tokens": n}
            for s in moe_shapes for dt in ("bf16", "fp8", "fp8-gemm") for n in moe_tokens]
    rows += [{"op": "moe_layer", "shape": s, "dtype": "bf16", "n_tokens": n}
             for s in ([s for s in moe_shapes if s in MOE_LAYER_SHAPES] or list(moe_shapes)[:2]) for n in moe_tokens]
    rows += [{"op": "gemm", "shape": s, "index": i, "k": k, "n": n_out, "dtype": dt, "n_tokens": n}
             for s, gemms in gemm_shapes.items() for i, (k, n_out) in enumerate(gemms)
             for dt in ("bf16", "fp8") for n in gemm_tokens]
    return rows


def measure(rows: list[dict], timer, progress=None) -> list[dict]:
    """``rows`` with ``time_s = timer(row)``; a row whose timer raises keeps the error (``error``)."""
    out = []
    for i, r in enumerate(rows):
        try:
            t = float(timer(r))
            out.append({**r, "time_s": t} if t > 0 else {**r, "error": f"non-positive time {t!r}"})
        except Exception as e:  # noqa: BLE001 - one failing kernel must not lose the other rows
            out.append({**r, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"})
        if progress:
            progress(i + 1, len(rows), out[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--quick", action="store_true", help="a few points per op (smoke test)")
    ap.add_argument("--device", default="cuda", help="torch device [cuda]; 'cpu' checks the code paths only")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (with --device cpu: a code-path check)")
    ap.add_argument("--only", default="", help="comma-separated op:dtype or shape names to keep (e.g. "
                    "moe_experts:fp8-gemm,llama-2-7b) [all rows]")
    a = ap.parse_args(argv)
    from gpu_profile_moe_cuda import MoEBackend  # needs torch

    t0 = time.time()
    shapes = (TINY_MOE_SHAPES, TINY_GEMM_SHAPES) if a.tiny else (MOE_SHAPES, GEMM_SHAPES)
    backend = MoEBackend(a.device, moe_shapes=shapes[0])
    rows = plan(quick=a.quick, moe_shapes=shapes[0], gemm_shapes=shapes[1])
    if a.only:
        keep = set(a.only.split(","))
        rows = [r for r in rows if f"{r['op']}:{r['dtype']}" in keep or r["shape"] in keep]
    done = measure(rows, backend, progress=lambda i, n, r: print(
        f"{i}/{n} {r['op']} {r.get('shape')} {r.get('dtype')} {r['n_tokens']}: "
        f"{r.get('time_s', r.get('error'))}", file=sys.stderr, flush=True))
    info = {**backend.info(), "quick": a.quick, "wall_s": time.time() - t0,
            "command": "python benchmarks/gpu_profile_moe.py " + " ".join(argv or sys.argv[1:])}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"info": info, "rows": done}, indent=1) + "\n")
    tmp.replace(out)
    bad = sum("error" in r for r in done)
    print(f"wrote {len(done)} rows ({bad} with errors) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
