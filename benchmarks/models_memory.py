"""Issue 26 figures: MoE/FP8 against published results, the CPU KV tier on the Mooncake trace, and
the simulator's cost per request of the MoE presets against dense presets of about their active size.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/models_memory.py [--part published|moe|capacity|ttft|pp|frontend|cpu|routers|speed|all]

(``ttft``, ``pp`` and ``frontend``: ``benchmarks/gpt_oss_bursts.py``, GPUStack's gpt-oss-120b ShareGPT bursts.)

Prints markdown tables (docs/bench/models_memory.md). Reads ../shared/reference (the Mooncake trace,
the H200 FP8 GEMM rows) or $INFERENCEGYM_REFERENCE_DIR.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
from inferencegym.sim.calibration.reference import default_reference_dir
from inferencegym.sim.execution import ExecutionModel

from burst_runs import HARMONY_PROMPT_TOKENS  # noqa: F401  (gpt_oss_bursts and the tests read it here too)
from burst_runs import burst as _burst
from burst_runs import engine as _engine
from burst_runs import sharegpt_like as _sharegpt_like


def _row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _err(sim: float, pub: float) -> str:
    return f"{100 * (sim / pub - 1):+.1f}%"


def published() -> None:
    print(_row("model / feature", "published", "source", "simulated", "error"))
    print(_row(*["---"] * 5))
    ds = dict(model="deepseek-v3", gpu="h100-80gb", tensor_parallel=1, quantization="fp8")
    dec = ExecutionModel.from_preset(expert_parallel=64, **ds)
    t = dec.decode_step_time_s(256 * 64, 2050)
    print(_row("DeepSeek-V3 decode, 72 H100 (EP64 here), DP attention, 256 seq/GPU, 2,000-token prompts",
               "22,282 out tok/s per node", "LMSYS blog 2025-05-05 (SGLang large-scale EP)",
               f"{8 * 256 / t:,.0f}", _err(8 * 256 / t, 22282)))
    pf = ExecutionModel.from_preset(expert_parallel=32, **ds)
    n = 4096 * 32
    t = pf.iteration_time_s([(2000, 0)] * (n // 2000))
    print(_row("DeepSeek-V3 prefill, 32 H100 EP32, 2,000-token prompts, 4,096 tokens/GPU per batch",
               "52,300 in tok/s per node", "LMSYS blog 2025-05-05", f"{8 * n / 32 / t:,.0f}",
               _err(8 * n / 32 / t, 52300)))
    # FP8 GEMMs: the measured H200 speed-ups (the fit's input, so in-sample) and the vLLM docs' claim
    ref = default_reference_dir() / "h200" / "h200_llama2_7b_quant_gemm.json"
    rows = json.loads(ref.read_text())["rows"]
    b = ExecutionModel.from_preset(model="llama-2-7b", gpu="h200-141gb", engine_profile="kernel-only")
    f = b.with_quantization("fp8")
    meas = statistics.median(r["bf16_s"] / r["fp8_s"] for r in rows)
    sim = statistics.median(b.layer_op_times_s(r["n_tokens"])[r["op"]] / f.layer_op_times_s(r["n_tokens"])[r["op"]]
                            for r in rows)
    print(_row("FP8 GEMM speed-up, Llama-2-7B shapes on H200 (median of 24 GEMMs, 1-4096 tokens; fitted)",
               f"{meas:.2f}x", "measured for this project (../shared/reference/h200)", f"{sim:.2f}x",
               _err(sim, meas)))
    gain = []
    for model, tp in (("llama-3-8b", 1), ("llama-3-70b", 4)):
        m16 = ExecutionModel.from_preset(model=model, gpu="h100-80gb", tensor_parallel=tp)
        m8 = m16.with_quantization("fp8")
        # throughput at the largest batch each fits at 1,000 tokens of context (decode) plus prefill of 1,000
        for m in (m16, m8):
            bsz = min(256, m.kv_capacity_tokens() // 1500)
            m._bench = bsz / m.decode_step_time_s(bsz, 1000)
        gain.append(m8._bench / m16._bench)
    print(_row("FP8 W8A8 throughput gain over BF16 (decode at the largest batch <= 256 that fits, H100; "
               "Llama-3-8B TP1 / Llama-3-70B TP4)", "up to 1.6x", "vLLM docs, FP8 W8A8",
               " / ".join(f"{g:.2f}x" for g in gain), _err(max(gain), 1.6)))
    print()
    print("gpt-oss-120b and Qwen3-30B-A3B: --part moe")


GPUSTACK_H100 = ((100, 32000, 100, 3_200_000, 9_877, 16136.57, 23.99),
                 (500, 4000, 200, 1_999_249, 67_205, 14247.47, 31.70),
                 (500, 2000, 100, 999_120, 49_197, 14385.69, 41.35),
                 (1000, 128, 4, 127_755, 4_000, 17059.15, 304.80))
"""GPUStack performance lab, "Optimizing GPT-OSS-120B Throughput on NVIDIA H100 GPUs", baseline
(``vllm serve openai/gpt-oss-120b --max-model-len 32768``, vLLM 0.10.2, 1 H100; the page's
"Baseline benchmark results" in gpustack/gpustack ``docs/performance-lab/gpt-oss-120b/h100.md``):
requests, nominal input and output tokens of the random datasets, the run's total input and
generated tokens (without ``--ignore-eos`` the model stopped early: 134 of 200 output tokens on
average at 4,000/200), measured total tok/s and mean TPOT ms."""


def _even(total: int, n: int) -> list[int]:
    """``total`` split over ``n`` requests as evenly as integers allow."""
    q, r = divmod(total, n)
    return [q + (i < r) for i in range(n)]


def _gpustack_lengths(n: int, in_total: int, out_total: int) -> list[tuple[int, int]]:
    """The run's totals spread evenly over its requests (each request's own lengths are not published)."""
    return list(zip(_even(in_total, n), _even(out_total, n)))


def moe_rows() -> None:
    """gpt-oss-120b (MXFP4) and Qwen3-30B-A3B against published runs; vLLM before v0.14 scheduled
    synchronously (``sync``, :func:`_engine`), the 2026 run of PR #44220 asynchronously."""
    print(_row("case", "published", "simulated", "error"))
    print(_row(*["---"] * 4))
    for n, pin, pout, tin, tout, tot, tpot in GPUSTACK_H100:
        b = _burst("gpt-oss-120b", "h100-80gb", "mxfp4", 1, n, pin, pout, 8192, _gpustack_lengths(n, tin, tout),
                   sync=True, prompt_extra=HARMONY_PROMPT_TOKENS)
        print(_row(f"gpt-oss-120b H100, {n} x {pin}/{pout}, total tok/s", f"{tot:,.0f}", f"{b['total']:,.0f}",
                   _err(b["total"], tot)))
        print(_row(f"gpt-oss-120b H100, {n} x {pin}/{pout}, mean TPOT ms", f"{tpot:.1f}", f"{b['tpot_ms']:.1f}",
                   _err(b["tpot_ms"], tpot)))
    from sharegpt_sample import sharegpt_burst
    for label, lengths in (("vLLM's seed-0 ShareGPT sample", sharegpt_burst(1000, 215_312, 195_544)),
                           ("lognormal sd 0.8", _sharegpt_like(1000, 0.8))):
        b = _burst("gpt-oss-120b", "h100-80gb", "mxfp4", 1, 1000, 0, 0, 8192, lengths, sync=True,
                   prompt_extra=HARMONY_PROMPT_TOKENS)
        print(_row(f"gpt-oss-120b H100, 1000 ShareGPT ({label}), total tok/s / mean / p50 TPOT ms",
                   "6,095 / 54.1 / 47.6", f"{b['total']:,.0f} / {b['tpot_ms']:.1f} / {b['tpot_p50_ms']:.1f}",
                   f"{_err(b['total'], 6095.37)} / {_err(b['tpot_ms'], 54.10)} / {_err(b['tpot_p50_ms'], 47.57)}"))
    g = _engine("gpt-oss-120b", "h100-80gb", "mxfp4", sync=True)
    print(_row("gpt-oss-120b H100, decode step at batch 4, 340-token contexts (GPUStack ShareGPT at concurrency 4: "
               "mean TPOT) ms", "8.31", f"{1e3 * g.decode_step_time_s(4, 340):.2f}",
               _err(g.decode_step_time_s(4, 340), 8.31e-3)))
    print(_row("gpt-oss-120b H100, decode step at batch 8, 100-token contexts (vLLM PR #27523 bench latency, "
               "Marlin) ms", "9.1", f"{1e3 * g.decode_step_time_s(8, 100):.2f}",
               _err(g.decode_step_time_s(8, 100), 9.1e-3)))
    print(f"gpt-oss-120b mxfp4 on H100: weights {g.weight_bytes_per_gpu / 1e9:.1f} GB, KV capacity "
          f"{g.kv_capacity_tokens(1.0, 1024):,} tokens at 1,024 sequences (all of vLLM's KV memory; full-attention layers)")
    a = _engine("qwen3-30b-a3b", "a100-80gb", "fp16", sync=True)
    print(_row("qwen3-30b-a3b A100 TP1 BF16, 128/128 at concurrency 1, TPOT ms (tt-inference-server #340)", "9.6",
               f"{1e3 * a.decode_step_time_s(1, 200):.2f}", _err(a.decode_step_time_s(1, 200), 9.6e-3)))
    q = _burst("qwen3-30b-a3b", "h200-141gb", "fp16", 2, 1000, 1024, 128, 16384)
    print(f"qwen3-30b-a3b H200 TP2 BF16, 1000 x 1024/128 offline: {q['total']:,.0f} total tok/s "
          f"(vLLM PR #44220, triton MoE: 57,822; {_err(q['total'], 57821.92)})")


def capacity_rows() -> None:
    """vLLM's KV-capacity rule (``sim/gpu_memory.py``) against published vLLM start-up logs: the
    simulator's weights, profiling-run peak, non-torch memory and KV memory per GPU in GiB beside
    what vLLM logged, each at the run's utilisation, device memory, batched tokens and sampler path."""
    gib = 2 ** 30
    print(_row("run (vLLM log)", "settings", "weights logged / sim", "activation peak + non-torch logged / sim",
               "KV memory logged / sim"))
    print(_row(*["---"] * 5))
    oss = ExecutionModel.from_preset(model="gpt-oss-120b", gpu="h100-80gb", quantization="mxfp4").memory
    l8 = ExecutionModel.from_preset(model="llama-3-8b", gpu="h100-80gb", engine_profile="vllm-v0").memory
    h100 = 85_017_493_504  # torch.cuda.mem_get_info total on an H100 80GB HBM3 (79.18 GiB)
    runs = [  # label, settings, budget, max_num_seqs, logged weights, logged act+non-torch (None: derived), logged KV
        ("gpt-oss-120b, 1 H100, vLLM 0.10.1 pip (vllm-project/vllm#23278)",
         "util 0.90, 8,192 tokens, 1,024 seqs, PyTorch-native sampler",
         oss.variant(usable_bytes=0.90 * h100, sampler="torch-native"), 1024, 65.97, None, -2.14),
        ("gpt-oss-120b, 1 H100, vLLM 0.11 pip (#27508)",
         "util 0.95, 1,024 tokens, 1,024 seqs, PyTorch-native sampler",
         oss.variant(usable_bytes=0.95 * h100, max_batched_tokens=1024, sampler="torch-native"), 1024, 65.97,
         None, 1.71),
        ("Llama-3-8B, 1 H100, vLLM V0 (O'Reilly 'AI Inference on Kubernetes', Example 4-3)",
         "util 0.90 of 79.14 GiB, 8,192 tokens, 256 seqs, V0 sampler",
         l8.variant(usable_bytes=0.90 * 79.14 * gib), 256, 14.99, 0.12 + 1.19, 54.93),
    ]
    for label, settings, mb, seqs, w_log, act_log, kv_log in runs:
        act = (mb.activation_peak_bytes(seqs) + mb.non_torch_bytes) / gib
        kv = (mb.usable_bytes - mb.non_kv_bytes(seqs)) / gib
        if act_log is None:  # logged: weights and KV; the rest follows
            act_log = mb.usable_bytes / gib - w_log - kv_log
        print(_row(label, settings, f"{w_log:.2f} / {mb.weight_bytes_per_gpu / gib:.2f}",
                   f"{act_log:.2f} / {act:.2f}", f"{kv_log:.2f} / {kv:.2f}"))
    fi = oss.variant(usable_bytes=0.90 * h100)
    need = 32768 * fi.kv_bytes_per_token / gib
    print(_row("gpt-oss-120b, 1 H100, vLLM 0.10.2 container (GPUStack performance lab)",
               "util 0.90, 8,192 tokens, 1,024 seqs, FlashInfer sampler; started at --max-model-len 32768",
               f"- / {fi.weight_bytes_per_gpu / gib:.2f}",
               f"<= {fi.usable_bytes / gib - 65.97 - need:.2f} (to start) / "
               f"{(fi.activation_peak_bytes(1024) + fi.non_torch_bytes) / gib:.2f}",
               f">= {need:.2f} / {fi.kv_free_bytes(1024) / gib:.2f} (PyTorch-native: "
               f"{(fi.usable_bytes - fi.variant(sampler='torch-native').non_kv_bytes(1024)) / gib:.2f})"))


def _mooncake(cpu_gb: float, router: str = "llmd_precise", connector: str = "offload") -> dict:
    """The `simulate` command of the page, run in process (same options; ``connector``:
    ``--cpu-kv-connector``)."""
    from inferencegym.cli.simulate import DEFAULTS, run_scenario

    path = default_reference_dir() / "traces" / "mooncake" / "synthetic_trace.jsonl"
    o = dict(DEFAULTS, model="llama-3-8b", gpu="h100-80gb", replicas=8, router=router,
             scheduler="sarathi", chunk_size=2048, kv_budget_fraction=0.2, trace=str(path),
             trace_format="mooncake", cpu_kv_gb=cpu_gb, cpu_kv_connector=connector)
    t0 = time.process_time()
    s, c = run_scenario(o)
    cpu_s = time.process_time() - t0
    res = c.results()
    ok = ~res["rejected"]
    ttft = res["first_token_s"][ok] - res["arrival_s"][ok]
    return {"hit": s["prefix_hit_rate"], "tiers": s["prefix_hit_rate_by_tier"], "mean": float(np.mean(ttft)),
            "p50": s["ttft_s"]["p50"], "p90": s["ttft_s"]["p90"], "p99": s["ttft_s"]["p99"], "cpu_s": cpu_s,
            "n": int(ok.sum())}


def cpu_tier() -> None:
    print(_row("CPU tier per replica", "prefix hit rate (GPU / CPU)", "mean TTFT s", "p50", "p90", "p99",
               "completed", "sim CPU s"))
    print(_row(*["---"] * 8))
    out = {}
    for gb, conn in ((0.0, "offload"), (250.0, "offload"), (250.0, "lmcache")):
        r = out[gb, conn] = _mooncake(gb, connector=conn)
        print(_row(f"{gb:.0f} GB" + (f" ({conn})" if gb else ""),
                   f"{r['hit']:.3f} ({r['tiers']['gpu']:.3f} / {r['tiers']['cpu']:.3f})",
                   f"{r['mean']:.3f}", f"{r['p50']:.3f}", f"{r['p90']:.3f}", f"{r['p99']:.3f}", r["n"],
                   f"{r['cpu_s']:.1f}"))
    base = out[0.0, "offload"]["mean"]
    print(f"\nmean TTFT change with the CPU tier: {100 * (out[250.0, 'offload']['mean'] / base - 1):+.1f}% "
          f"(vLLM-style offload), {100 * (out[250.0, 'lmcache']['mean'] / base - 1):+.1f}% (LMCache connector)")


def routers() -> None:
    """Does the CPU tier change which router to pick? Same Mooncake setup, several routers."""
    print(_row("router", "hit rate, no tier", "mean TTFT s, no tier", "hit rate, 250 GB tier",
               "mean TTFT s, 250 GB tier"))
    print(_row(*["---"] * 5))
    for router in ("round_robin", "least_outstanding_requests", "llmd_precise", "dynamo_kv",
                   "sglang_cache_aware"):
        a, b = _mooncake(0.0, router), _mooncake(250.0, router)
        print(_row(router, f"{a['hit']:.3f}", f"{a['mean']:.3f}", f"{b['hit']:.3f}", f"{b['mean']:.3f}"))


def _cost(model: str, gpu: str, quant: str, ep: int, reqs_seed: int) -> float:
    rng = np.random.default_rng(reqs_seed)
    t = np.cumsum(rng.exponential(1 / 8.0, 2000))
    reqs = [Request(req_id=i, arrival_s=float(t[i]), prompt_tokens=int(rng.integers(100, 2000)),
                    output_tokens=int(rng.integers(20, 400))) for i in range(len(t))]
    rc = ReplicaConfig(model=model, gpu=gpu, quantization=quant, expert_parallel=ep, scheduler="sarathi")
    c = Cluster(ClusterConfig(replica=rc, num_replicas=2, router="least_outstanding_requests"),
                rng=np.random.default_rng(0))
    c.submit(reqs)
    t0 = time.process_time()
    c.drain()
    return (time.process_time() - t0) / len(reqs)


def speed() -> None:
    pairs = [(("qwen3-30b-a3b", "h100-80gb", "fp16", 1), ("llama-3.2-3b", "h100-80gb", "fp16", 1)),
             (("qwen3-30b-a3b", "h100-80gb", "fp16", 1), ("llama-3.2-1b", "h100-80gb", "fp16", 1)),
             (("gpt-oss-120b", "h100-80gb", "mxfp4", 1), ("llama-2-7b", "h100-80gb", "fp16", 1)),
             (("deepseek-v3", "h200-141gb", "fp8", 8), ("codellama-34b", "h200-141gb", "fp16", 1))]
    print(_row("MoE preset", "dense preset (nearest size to its active parameters)", "MoE us/request",
               "dense us/request", "ratio (median of 3 interleaved)"))
    print(_row(*["---"] * 5))
    for moe, dense in pairs:
        ratios, a, b = [], [], []
        for rep in range(3):
            x = _cost(*moe, reqs_seed=rep)
            y = _cost(*dense, reqs_seed=rep)
            a.append(x)
            b.append(y)
            ratios.append(x / y)
        print(_row(f"{moe[0]} ({moe[2]}, EP{moe[3]})", dense[0], f"{1e6 * statistics.median(a):.0f}",
                   f"{1e6 * statistics.median(b):.0f}", f"{statistics.median(ratios):.2f}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("published", "moe", "capacity", "ttft", "pp", "frontend", "cpu", "routers", "speed", "all"),
                    default="all")
    a = ap.parse_args()
    if a.part in ("published", "all"):
        published()
    if a.part in ("moe", "all"):
        moe_rows()
    if a.part in ("capacity", "all"):
        capacity_rows()
    if a.part in ("ttft", "pp", "frontend", "all"):
        import gpt_oss_bursts  # GPUStack's ShareGPT bursts at TP1 / TP2 / TP4 / PP2

        if a.part in ("ttft", "all"):
            gpt_oss_bursts.ttft_rows()
        if a.part in ("pp", "all"):
            gpt_oss_bursts.pp_rows()
            print()
            gpt_oss_bursts.decode_step_rows()
            print()
            gpt_oss_bursts.greedy_rows()
            print()
            gpt_oss_bursts.a100_rows()
        if a.part in ("frontend", "all"):
            gpt_oss_bursts.frontend_rows()
            print()
            gpt_oss_bursts.short_rows()
    if a.part in ("cpu", "all"):
        cpu_tier()
    if a.part in ("routers", "all"):
        routers()
    if a.part in ("speed", "all"):
        speed()


if __name__ == "__main__":
    main()
