"""vLLM V1's PyTorch sampler over batch x vocabulary on one GPU: the price of every iteration's sampling.

The ``vllm-v1`` engine profile prices the sampler as ``gpu_fixed_s + sampler_s_per_logit x batch x
vocabulary`` (``sim/calibration/engines.py``), fitted on two points (12 and 64 sequences, 32,000
entries; ``decode_step_gpu.py``). Serving runs of today's models sample up to 1,024 sequences over
128k-201k entries (Llama-3, Qwen3, gpt-oss), 500x the fitted batch x vocabulary. This sweep times the
same three paths (``decode_step_gpu.sampler_fn``: top-p at temperature 0.6, plain random, greedy) at
batch 1-1,024 over 32,000 / 128,256 / 151,936 / 201,088 entries, graph-replayed (GPU time: the
sampler's kernels on the step's stream) and eager.

    python benchmarks/gpu_sampler_sweep.py --out sampler_sweep.json           # GPU, ~60 s
    python benchmarks/gpu_sampler_sweep.py --device cpu --tiny --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_step_gpu import _graph, _time, sampler_fn  # noqa: E402  (a sibling benchmark script)

VOCABS = (32000, 128256, 151936, 201088)
"""Llama-2, Llama-3, Qwen2.5/Qwen3, gpt-oss (o200k_harmony) vocabulary sizes."""
BATCHES = (1, 16, 64, 256, 512, 1024)
KINDS = ("top_p", "greedy", "random")


@torch.inference_mode()
def sweep(dev: str, tiny: bool) -> dict:
    """Every (kind, vocabulary, batch) row, graph-replayed and eager; a row that fails says why."""
    t0 = time.perf_counter()
    vocabs, batches = ((1000,), (1, 4)) if tiny else (VOCABS, BATCHES)
    info = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__}
    rows = []
    for kind in KINDS:
        for vocab in vocabs:
            for b in batches:
                row = {"kind": kind, "vocab": vocab, "batch": b}
                try:
                    fn = sampler_fn(b, dev, kind, vocab)
                    row["graph_s"] = _time(_graph(fn, dev), dev, reps=9)
                    row["eager_s"] = _time(fn, dev, reps=9)
                except Exception as e:  # noqa: BLE001 (a shape that does not fit is recorded, not fatal)
                    row["error"] = f"{type(e).__name__}: {e}"[:200]
                rows.append(row)
                print(json.dumps(row), flush=True)
                if dev == "cuda":
                    torch.cuda.empty_cache()
    info["wall_s"] = time.perf_counter() - t0
    return {"info": info, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small shapes (a CPU check of the script)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    res = sweep(a.device, a.tiny)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
