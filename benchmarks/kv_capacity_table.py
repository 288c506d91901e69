"""KV capacity of every registered task's replica and of the benchmark configurations, as tokens.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/kv_capacity_table.py [--json out.json]

The blast radius of a change to the memory rule (``inferencegym/sim/gpu_memory.py``): run it on two
trees and compare (``--compare old.json``). Each row is the replica's model, GPU, tensor-parallel
degree, quantization, engine profile and batch cap (``max_num_seqs``) at the task's KV budget.
"""

from __future__ import annotations

import argparse
import json
import sys

BENCH_ROWS = [  # (label, model, gpu, tp, quantization, engine profile, batch cap, extra kwargs)
    ("gpt-oss-120b H100 TP1 (GPUStack)", "gpt-oss-120b", "h100-80gb", 1, "mxfp4", "vllm-v1", 1024, {}),
    ("gpt-oss-120b H100 TP2 (GPUStack)", "gpt-oss-120b", "h100-80gb", 2, "mxfp4", "vllm-v1", 1024, {}),
    ("gpt-oss-120b H100 PP2 (GPUStack)", "gpt-oss-120b", "h100-80gb", 1, "mxfp4", "vllm-v1", 1024,
     {"pipeline_parallel": 2}),
    ("qwen3-30b-a3b H200 TP2", "qwen3-30b-a3b", "h200-141gb", 2, "fp16", "vllm-v1", 1024, {}),
    ("deepseek-v3 H200 EP8 fp8", "deepseek-v3", "h200-141gb", 1, "fp8", "vllm-v1", 256, {"expert_parallel": 8}),
    ("llama-2-7b H100 TP1 (BLIS)", "llama-2-7b", "h100-80gb", 1, "fp16", "vllm-v1", 128, {}),
    ("llama-2-70b H100 TP4 (BLIS)", "llama-2-70b", "h100-80gb", 4, "fp16", "vllm-v1", 128, {}),
    ("codellama-34b H100 TP2 (BLIS)", "codellama-34b", "h100-80gb", 2, "fp16", "vllm-v1", 128, {}),
    ("llama-3-8b H100 TP1 (Lambda, V0)", "llama-3-8b", "h100-80gb", 1, "fp16", "vllm-v0", 256, {}),
    ("llama-3-70b H100 TP4 (Lambda, V0)", "llama-3-70b", "h100-80gb", 4, "fp16", "vllm-v0", 256, {}),
]


def _capacity(m, fraction: float, batch_cap: int) -> int:
    try:
        return m.kv_capacity_tokens(fraction, batch_cap)
    except TypeError:  # trees before the batch-cap-aware rule
        return m.kv_capacity_tokens(fraction)


def rows() -> list[dict]:
    from inferencegym.sim.execution import ExecutionModel
    from inferencegym.tasks import list_tasks
    out = []
    for t in list_tasks():
        m = ExecutionModel.from_preset(model=t.model, gpu=t.gpu, tensor_parallel=t.tensor_parallel,
                                       quantization=t.knobs.quantization, engine_profile=t.engine_profile)
        out.append({"row": f"task {t.task_id}", "model": t.model, "gpu": t.gpu, "tp": t.tensor_parallel,
                    "quantization": t.knobs.quantization, "engine": t.engine_profile,
                    "batch_cap": t.knobs.batch_cap,
                    "kv_tokens": _capacity(m, t.knobs.kv_budget_fraction, t.knobs.batch_cap)})
    for label, model, gpu, tp, q, eng, cap, kw in BENCH_ROWS:
        m = ExecutionModel.from_preset(model=model, gpu=gpu, tensor_parallel=tp, quantization=q,
                                       engine_profile=eng, **kw)
        out.append({"row": label, "model": model, "gpu": gpu, "tp": tp, "quantization": q, "engine": eng,
                    "batch_cap": cap, "kv_tokens": _capacity(m, 0.9, cap)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--compare", help="rows of another tree (--json output) to print old -> new")
    a = ap.parse_args(argv)
    new = rows()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(new, f, indent=1)
    old = {}
    if a.compare:
        with open(a.compare) as f:
            old = {r["row"]: r["kv_tokens"] for r in json.load(f)}
    print("| row | model / GPU / TP / quant / engine / batch cap | KV tokens" + (" old -> new | change |" if old else " |"))
    print("| --- | --- | --- |" + (" --- |" if old else ""))
    for r in new:
        cfg = f"{r['model']} / {r['gpu']} / {r['tp']} / {r['quantization']} / {r['engine']} / {r['batch_cap']}"
        if old and r["row"] in old:
            o = old[r["row"]]
            ch = f"{(r['kv_tokens'] - o) / o:+.1%}" if o else "n/a"
            print(f"| {r['row']} | {cfg} | {o:,} -> {r['kv_tokens']:,} | {ch} |")
        else:
            print(f"| {r['row']} | {cfg} | {r['kv_tokens']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
