"""GPUStack's LMCache experiment replayed: multi-turn chat on one RTX 4090, with and without a CPU tier.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/lmcache_multiturn.py [--seeds 3] [--connectors offload,lmcache]

Published (GPUStack performance lab, "Evaluating LMCache Prefill Acceleration in vLLM", vLLM
v0.10.1.1, Qwen3-8B on an RTX 4090 24GB, LMCache with 50 GB of CPU memory, vLLM's
``benchmarks/multi_turn`` with 24 conversations of 12-18 turns, a 500-token common prefix, a per-
conversation prefix drawn lognormal with an average of 4,000 tokens (max 20,000), 120-160 new tokens
per turn, 80-120 output tokens, 10 clients with 10 active conversations): mean TTFT 4,350 -> 2,646 ms
(-39.2 %) at 5K input tokens, 5,071 -> 2,091 ms (-58.8 %) at 20K.

Simulated like for like, as far as the page says: closed-loop clients (a client sends a
conversation's next turn when the previous answer is complete; a finished conversation is replaced
by the next of the 24), prompts = the conversation's history, the GPU prefix cache at vLLM's KV
capacity on the card (``sim/gpu_memory.py``), the CPU tier 50 GB at PCIe 4.0 x16 (25 GB/s). Not in the
page, so assumed: the lognormal's spread (log-sd 1.0), the 20K case as the same generator with a
20,000-token average prefix (max 36,000: the conversation must fit Qwen3-8B's 40,960 tokens), the
card's CUDA-reported memory 23.65 GiB (vLLM logs of 24 GB cards: 23.53-23.67 GiB) and its speed (no
calibrated RTX 4090 preset: the L40S's uncalibrated kernel efficiencies with the 4090's datasheet
rates, 165 TFLOP/s BF16 with FP32 accumulation, 1,008 GB/s). Compared: the relative TTFT change, with
the CPU tier as vLLM's offloading runs it (``offload``) and as LMCache's connector does (``lmcache``:
synchronous store of each prefill, 256-token chunks, LMCache's logged store/retrieve rates; ``sim/cpu_kv.py``),
beside the page's TPOT and input throughput.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.presets import GIB, get_gpu, get_model, register_gpu
from inferencegym.workload.hashchain import sim_block_hashes

PUBLISHED = {"5K": (4350.48, 2646.09), "20K": (5070.52, 2091.00)}
PUBLISHED_TPOT_INPUT_TPS = {"5K": ((48.47, 5849.0), (30.60, 9426.0)), "20K": ((33.91, 4312.17), (25.83, 7750.60))}
"""Mean TPOT ms and input tok/s, without / with LMCache (the same page)."""
CASES = {"5K": (4000, 20000), "20K": (20000, 33000)}  # prefix average, max (the history must fit the cache)


def rtx4090():
    """The RTX 4090 as a GPU preset (datasheet rates on the L40S's uncalibrated kernel efficiencies)."""
    return register_gpu(dataclasses.replace(
        get_gpu("l40s-48gb"), name="rtx4090-24gb", fp16_tflops=165.2, int8_tops=660.6, fp8_tflops=660.6,
        cuda_core_tflops=82.6, mem_gbytes_per_s=1008.0, memory_gbytes=24.0, memory_bytes=23.65 * GIB,
        gpu_hour_usd=0.40, calibrated=False), replace=True)


def qwen3_8b_engine() -> ExecutionModel:
    """Qwen3-8B (config.json: 36 layers, hidden 4,096, 32 heads, 8 KV heads, head_dim 128, FFN 12,288,
    vocabulary 151,936, untied) on the 4090, vLLM V1 with 2,048 batched tokens (its default below 70 GiB)."""
    rtx4090()
    q = dataclasses.replace(get_model("llama-3-8b"), name="qwen3-8b", num_layers=36, hidden_size=4096,
                            num_heads=32, num_kv_heads=8, ffn_size=12288, vocab_size=151936,
                            tied_embeddings=False, draft_model=None, hf_id="Qwen/Qwen3-8B")
    base = ExecutionModel.from_preset(model="llama-3-8b", gpu="rtx4090-24gb", draft_model=None)
    return base._replace(model=q, max_batched_tokens=2048, draft=None)


def conversations(rng: np.random.Generator, avg: int, cap: int, n: int = 24) -> list[dict]:
    """vLLM's multi-turn generator as GPUStack configured it: per conversation its turns, each turn's
    prompt length (the whole history) and output length, and the token stream's 16-token block ids."""
    sigma = 1.0
    mu = np.log(avg) - sigma * sigma / 2
    out, next_id = [], 1_000_000
    for _ in range(n):
        turns = int(rng.integers(12, 19))
        prefix = int(min(cap, max(1, rng.lognormal(mu, sigma))))
        lengths, hist = [], 500 + prefix
        for _t in range(turns):
            hist += int(rng.integers(120, 161))
            o = int(rng.integers(80, 121))
            lengths.append((hist, o))
            hist += o
        blocks = -(-hist // 16)
        ids = list(range(32)) + list(range(next_id, next_id + blocks - 32))  # 500-token common prefix: 31 full blocks shared
        next_id += blocks
        out.append({"turns": lengths, "ids": np.asarray(ids[:blocks], dtype=np.int64)})
    return out


def run(engine: ExecutionModel, convs: list[dict], cpu_gb: float, clients: int = 10, dt: float = 0.01,
        connector: str = "lmcache") -> dict:
    rc = ReplicaConfig(model="llama-3-8b", gpu="rtx4090-24gb", scheduler="sarathi", chunk_size=2048,
                       batch_cap=256, cpu_kv_gb=cpu_gb, cpu_kv_link_gb_s=25.0, kv_budget_fraction=1.0,
                       cpu_kv_connector=connector)
    c = Cluster(ClusterConfig(replica=rc, num_replicas=1, router="round_robin"), rng=np.random.default_rng(0),
                execution_model=engine)
    queue = list(range(len(convs)))
    active: dict[int, tuple[int, int, Request]] = {}  # client -> (conversation, turn, request)
    rid = 0
    done: list[Request] = []

    def send(client: int, conv: int, turn: int, now: float) -> None:
        nonlocal rid
        p, o = convs[conv]["turns"][turn]
        r = Request(req_id=rid, arrival_s=now, prompt_tokens=p, output_tokens=o,
                    block_hashes=sim_block_hashes(convs[conv]["ids"], p, trace_block_tokens=16))
        rid += 1
        active[client] = (conv, turn, r)
        c.submit([r])

    for k in range(min(clients, len(queue))):
        send(k, queue.pop(0), 0, 0.0)
    t = 0.0
    while active:
        t += dt
        c.run_until(t)
        for k, (conv, turn, r) in list(active.items()):
            if np.isfinite(r.completion_s) or r.rejected_reason is not None:
                if r.rejected_reason is None:
                    done.append(r)
                del active[k]
                if turn + 1 < len(convs[conv]["turns"]):
                    send(k, conv, turn + 1, t)
                elif queue:
                    send(k, queue.pop(0), 0, t)
    ttft = [r.first_token_s - r.arrival_s for r in done]
    tpot = [(r.completion_s - r.first_token_s) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    inp = sum(r.prompt_tokens for r in done)
    return {"ttft_ms": 1e3 * statistics.fmean(ttft), "input_tps": inp / t, "n": len(done),
            "tpot_ms": 1e3 * statistics.fmean(tpot) if tpot else float("nan"),
            "kv_tokens": c.replicas[0].kv.capacity_blocks * 16, "rejected": rid - len(done)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="conversation sets per case (seed 0, 1, ...)")
    ap.add_argument("--cases", default="5K,20K", help="comma-separated cases of the page (5K, 20K)")
    ap.add_argument("--connectors", default="offload,lmcache",
                    help="CPU-tier connectors to run (ReplicaConfig.cpu_kv_connector) [offload,lmcache]")
    a = ap.parse_args(argv)
    eng = qwen3_8b_engine()
    print("| case | CPU tier | published mean TTFT ms without / with LMCache (change) | simulated without / "
          "with 50 GB CPU tier (change), mean of seeds | per seed change | TPOT ms without / with: published, "
          "simulated | input tok/s without / with: published, simulated |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for case in a.cases.split(","):
        avg, cap = CASES[case]
        sets = [conversations(np.random.default_rng(1000 + s), avg, cap) for s in range(a.seeds)]
        offs = [run(eng, convs, 0.0) for convs in sets]
        for conn in a.connectors.split(","):
            ons = [run(eng, convs, 50.0, connector=conn) for convs in sets]
            t0 = statistics.fmean(o["ttft_ms"] for o in offs)
            t1 = statistics.fmean(o["ttft_ms"] for o in ons)
            ch = [y["ttft_ms"] / x["ttft_ms"] - 1 for x, y in zip(offs, ons)]
            p0, p1 = PUBLISHED[case]
            (pt0, pi0), (pt1, pi1) = PUBLISHED_TPOT_INPUT_TPS[case]
            st = [statistics.fmean(o[k] for o in xs) for xs in (offs, ons) for k in ("tpot_ms", "input_tps")]
            print(f"| {case} | {conn} | {p0:,.0f} / {p1:,.0f} ({p1 / p0 - 1:+.1%}) | {t0:,.0f} / {t1:,.0f} "
                  f"({t1 / t0 - 1:+.1%}) | {', '.join(f'{x:+.1%}' for x in ch)} | {pt0:.1f} / {pt1:.1f}; "
                  f"{st[0]:.1f} / {st[2]:.1f} | {pi0:,.0f} / {pi1:,.0f}; {st[1]:,.0f} / {st[3]:,.0f} |")
    off = offs[-1]
    print(f"GPU KV cache: {off['kv_tokens']:,} tokens (Qwen3-8B on the 4090 at 0.9, 256 sequences)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
