"""GPUStack's LMCache experiment replayed: multi-turn chat on one RTX 4090, with and without a CPU tier.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/lmcache_multiturn.py [--seeds 3] [--connectors offload,lmcache]

Published (GPUStack performance lab, "Evaluating LMCache Prefill Acceleration in vLLM", vLLM
v0.10.1.1, Qwen3-8B on an RTX 4090 24GB, LMCache with 50 GB of CPU memory, vLLM's
``benchmarks/multi_turn`` with 24 conversations of 12-18 turns, a 500-token common prefix, a per-
conversation prefix drawn lognormal with an average of 4,000 tokens (max 20,000), 120-160 new tokens
per turn, 80-120 output tokens, 10 clients with 10 active conversations): mean TTFT 4,350 -> 2,646 ms
(-39.2 %) at 5K input tokens, 5,071 -> 2,091 ms (-58.8 %) at 20K.

Simulated like for like, with the workload vLLM's generator and client produce from that config
(``conversations`` and ``run``: turns count messages, the lognormal's median ratio 0.85, Qwen3's chat
template tokens, the benchmark's early stop when the first client runs out of conversations), the
GPU prefix cache at vLLM's KV capacity on the card (``sim/gpu_memory.py``), the CPU tier 50 GB at
PCIe 4.0 x16 (25 GB/s). The 20K case is not on the page; it is inferred from the page's figures
(``CASES``). The card: its CUDA-reported memory 23.65 GiB (vLLM logs of 24 GB cards: 23.53-23.67 GiB)
and its datasheet rates (``rtx4090``). Compared: the relative TTFT change, with the CPU tier as vLLM's
offloading runs it (``offload``) and as LMCache's connector does (``lmcache``: synchronous store of
each prefill, 256-token chunks, LMCache's logged store/retrieve rates; ``sim/cpu_kv.py``), beside the
page's TPOT and input throughput.
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
CASES = {"5K": (4000, 20000, 10), "20K": (20000, 20000, 2)}
"""Prefix average and cap, clients. 5K: the page's config and command. 20K: not on the page; inferred
from its figures by Little's law (input/output tokens 183 per answer token, ~2 requests in flight
with or without LMCache, see docs/bench/models_memory.md): the average raised to 20,000 with the
cap left at 20,000 (mean prompt ~17k tokens), 2 clients."""


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


CHAT_MESSAGE_TOKENS = 5
"""Qwen3's chat template around one message: ``<|im_start|>``, the role, a newline, ``<|im_end|>``, a newline."""
CHAT_GENERATION_TOKENS = 3
"""The generation prompt ``<|im_start|>assistant\\n`` closing every prompt."""
MEDIAN_RATIO = 0.85
"""vLLM's multi-turn generator's lognormal ``median_ratio`` default (``bench_dataset.py``: sigma =
sqrt(2 ln(1 / 0.85)) = 0.570; the samples rescaled to the given average, then capped at ``max``)."""


def conversations(rng: np.random.Generator, avg: int, cap: int, n: int = 24) -> list[dict]:
    """vLLM's multi-turn generator (``benchmarks/multi_turn/bench_dataset.py``) as GPUStack configured it.

    ``num_turns`` counts messages, user and assistant (uniform 12-18, rounded up to even: 6-9 user
    turns); the per-conversation prefix is lognormal with ``median_ratio`` 0.85 rescaled to an exact
    average of ``avg`` over the conversations and capped at ``cap``; the 500-token common prefix and
    the prefix open the first user message; each user message 120-160 tokens, each answer 80-120
    (``max_tokens``; the answers, not the dataset's text, enter the history). Per turn: the engine's
    prompt length (history + Qwen3's chat template), the output length, the client-counted input
    tokens (message contents only, as the benchmark counts them), and the 16-token block ids."""
    msgs = rng.integers(12, 19, size=n)
    msgs = msgs + msgs % 2
    sigma = float(np.sqrt(2.0 * np.log(1.0 / MEDIAN_RATIO)))
    pre = rng.lognormal(np.log(avg * MEDIAN_RATIO), sigma, size=n)
    pre = np.round(np.minimum(pre * (avg / pre.mean()), cap)).astype(int)
    out, next_id = [], 1_000_000
    for c in range(n):
        turns = int(msgs[c]) // 2
        user = rng.integers(120, 161, size=turns)
        answer = rng.integers(80, 121, size=turns)
        lengths, hist, content = [], 0, 0
        for t in range(turns):
            u = int(user[t]) + (500 + int(pre[c]) if t == 0 else 0)
            # the previous answer's end and this user message's template, then the generation prompt
            hist += u + (CHAT_MESSAGE_TOKENS + CHAT_GENERATION_TOKENS if t == 0 else 2 * CHAT_MESSAGE_TOKENS)
            content += u
            lengths.append((hist, int(answer[t]), content))
            hist += int(answer[t])
            content += int(answer[t])
        blocks = -(-hist // 16)
        ids = list(range(32)) + list(range(next_id, next_id + blocks - 32))  # 500-token common prefix: 31 full blocks shared
        next_id += blocks
        out.append({"turns": lengths, "ids": np.asarray(ids[:blocks], dtype=np.int64)})
    return out


def run(engine: ExecutionModel, convs: list[dict], cpu_gb: float, clients: int = 10, dt: float = 0.01,
        connector: str = "lmcache", early_stop: bool = True) -> dict:
    """vLLM's multi-turn client loop: ``clients`` closed-loop clients with one active conversation
    each (``--max-active-conversations`` = clients); a client sends its conversation's next turn when
    the answer is complete and takes the next conversation when one ends. With ``early_stop`` (the
    benchmark's default, ``--no-early-stop`` not given) the run ends when a client finds no
    conversation left: the others finish the request in flight and stop."""
    rc = ReplicaConfig(model="llama-3-8b", gpu="rtx4090-24gb", scheduler="sarathi", chunk_size=2048,
                       batch_cap=256, cpu_kv_gb=cpu_gb, cpu_kv_link_gb_s=25.0, kv_budget_fraction=1.0,
                       cpu_kv_connector=connector)
    c = Cluster(ClusterConfig(replica=rc, num_replicas=1, router="round_robin"), rng=np.random.default_rng(0),
                execution_model=engine)
    queue = list(range(len(convs)))
    active: dict[int, tuple[int, int, Request, int]] = {}  # client -> (conversation, turn, request, content tokens)
    rid = 0
    done: list[tuple[Request, int, int]] = []
    stop = False

    def send(client: int, conv: int, turn: int, now: float) -> None:
        nonlocal rid
        p, o, content = convs[conv]["turns"][turn]
        r = Request(req_id=rid, arrival_s=now, prompt_tokens=p, output_tokens=o,
                    block_hashes=sim_block_hashes(convs[conv]["ids"], p, trace_block_tokens=16))
        rid += 1
        active[client] = (conv, turn, r, content)
        c.submit([r])

    for k in range(min(clients, len(queue))):
        send(k, queue.pop(0), 0, 0.0)
    t = 0.0
    while active:
        t += dt
        c.run_until(t)
        for k, (conv, turn, r, content) in list(active.items()):
            if np.isfinite(r.completion_s) or r.rejected_reason is not None:
                if r.rejected_reason is None:
                    done.append((r, turn, content))
                del active[k]
                if stop:
                    continue
                if turn + 1 < len(convs[conv]["turns"]):
                    send(k, conv, turn + 1, t)
                elif queue:
                    send(k, queue.pop(0), 0, t)
                elif early_stop:
                    stop = True
    rs = [d[0] for d in done]
    ttft = [r.first_token_s - r.arrival_s for r in rs]
    tpot = [(r.completion_s - r.first_token_s) / (r.output_tokens - 1) for r in rs if r.output_tokens > 1]
    span = max(r.completion_s for r in rs) - min(r.arrival_s for r in rs)  # the benchmark's runtime_sec
    first = [x for x, (_, turn, _) in zip(ttft, done) if turn == 0]
    later = [x for x, (_, turn, _) in zip(ttft, done) if turn > 0]
    return {"ttft_ms": 1e3 * statistics.fmean(ttft), "input_tps": sum(d[2] for d in done) / span, "n": len(done),
            "tpot_ms": 1e3 * statistics.fmean(tpot) if tpot else float("nan"),
            "first_turn_ttft_ms": 1e3 * statistics.fmean(first) if first else float("nan"),
            "later_turn_ttft_ms": 1e3 * statistics.fmean(later) if later else float("nan"),
            "queue_ms": 1e3 * statistics.fmean(r.first_scheduled_s - r.arrival_s for r in rs),
            "hit_rate": sum(r.cached_tokens for r in rs) / sum(r.prompt_tokens for r in rs),
            "prompt_tokens": statistics.fmean(r.prompt_tokens for r in rs),
            "kv_tokens": c.replicas[0].kv.capacity_blocks * 16, "rejected": rid - len(done)}


DETAIL = ("first_turn_ttft_ms", "later_turn_ttft_ms", "queue_ms", "hit_rate", "prompt_tokens", "n")
"""Per-run figures ``--detail`` prints (means over the seeds)."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="conversation sets per case (seed 0, 1, ...)")
    ap.add_argument("--cases", default="5K,20K", help="comma-separated cases of the page (5K, 20K)")
    ap.add_argument("--connectors", default="offload,lmcache",
                    help="CPU-tier connectors to run (ReplicaConfig.cpu_kv_connector) [offload,lmcache]")
    ap.add_argument("--detail", action="store_true",
                    help="also print the decomposition (TTFT of first / later turns, queueing, hit rate)")
    a = ap.parse_args(argv)
    eng = qwen3_8b_engine()
    print("| case | CPU tier | published mean TTFT ms without / with LMCache (change) | simulated without / "
          "with 50 GB CPU tier (change), mean of seeds | per seed change | TPOT ms without / with: published, "
          "simulated | input tok/s without / with: published, simulated |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for case in a.cases.split(","):
        avg, cap, ncl = CASES[case]
        sets = [conversations(np.random.default_rng(1000 + s), avg, cap) for s in range(a.seeds)]
        offs = [run(eng, convs, 0.0, clients=ncl) for convs in sets]
        for conn in a.connectors.split(","):
            ons = [run(eng, convs, 50.0, clients=ncl, connector=conn) for convs in sets]
            t0 = statistics.fmean(o["ttft_ms"] for o in offs)
            t1 = statistics.fmean(o["ttft_ms"] for o in ons)
            ch = [y["ttft_ms"] / x["ttft_ms"] - 1 for x, y in zip(offs, ons)]
            p0, p1 = PUBLISHED[case]
            (pt0, pi0), (pt1, pi1) = PUBLISHED_TPOT_INPUT_TPS[case]
            st = [statistics.fmean(o[k] for o in xs) for xs in (offs, ons) for k in ("tpot_ms", "input_tps")]
            print(f"| {case} | {conn} | {p0:,.0f} / {p1:,.0f} ({p1 / p0 - 1:+.1%}) | {t0:,.0f} / {t1:,.0f} "
                  f"({t1 / t0 - 1:+.1%}) | {', '.join(f'{x:+.1%}' for x in ch)} | {pt0:.1f} / {pt1:.1f}; "
                  f"{st[0]:.1f} / {st[2]:.1f} | {pi0:,.0f} / {pi1:,.0f}; {st[1]:,.0f} / {st[3]:,.0f} |")
            if a.detail:
                for lab, xs in (("without", offs), ("with", ons)):
                    d = {k: round(statistics.fmean(o[k] for o in xs), 3) for k in DETAIL}
                    print(f"  {case} {conn} {lab}: " + ", ".join(f"{k} {v:,}" for k, v in d.items()))
    off = offs[-1]
    print(f"GPU KV cache: {off['kv_tokens']:,} tokens (Qwen3-8B on the 4090 at 0.9, 256 sequences)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
