"""One replica's burst runs of the issue-26 benchmarks (``models_memory.py``, ``gpt_oss_bursts.py``):
the ``vllm-v1`` execution model of a preset, ShareGPT-like lengths, and ``n`` requests sent at once.
Its own module so that both benchmark scripts import it and neither imports the other."""

from __future__ import annotations

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
from inferencegym.sim.execution import ExecutionModel


def sharegpt_like(n: int, sigma: float, seed: int = 0) -> list[tuple[int, int]]:
    """``n`` (prompt, output) pairs, lognormal with log-sd ``sigma`` (an assumption: ShareGPT's length
    shape is not in the repository), kept as vLLM's benchmark keeps ShareGPT conversations
    (``is_valid_sequence``: prompt and output >= 4 tokens, prompt <= 1,024, prompt + output <= 2,048)
    and with the means GPUStack's 1,000 ShareGPT prompts had (215,312 input and 195,544 output
    tokens; the log-means are moved until the kept pairs match them)."""
    target = (215.312, 195.544)
    mu = [np.log(t) - sigma * sigma / 2 for t in target]
    for _ in range(30):
        rng = np.random.default_rng(seed)
        p = np.maximum(1, np.rint(rng.lognormal(mu[0], sigma, 8 * n))).astype(int)
        o = np.maximum(1, np.rint(rng.lognormal(mu[1], sigma, 8 * n))).astype(int)
        keep = (p >= 4) & (o >= 4) & (p <= 1024) & (p + o <= 2048)
        p, o = p[keep][:n], o[keep][:n]
        mu[0] += float(np.log(target[0] / p.mean()))
        mu[1] += float(np.log(target[1] / o.mean()))
    return list(zip(p.tolist(), o.tolist()))


def engine(model: str, gpu: str, quant: str, tp: int = 1, pp: int = 1, sync: bool = False) -> ExecutionModel:
    """The ``vllm-v1`` execution model; ``sync``: scheduling synchronously, as every vLLM before
    v0.14 did by default (async scheduling became the default in v0.14, vllm-project/vllm#27614;
    GPUStack's "optimized" runs add ``--async-scheduling`` to its v0.10.2 baseline), so the
    step's CPU work adds to its kernels instead of overlapping them."""
    m = ExecutionModel.from_preset(model=model, gpu=gpu, quantization=quant, tensor_parallel=tp,
                                   pipeline_parallel=pp)
    return m._replace(engine=m.engine.synchronous()) if sync else m


HARMONY_PROMPT_TOKENS = 67
"""Tokens vLLM's chat endpoint adds to every gpt-oss prompt (GPUStack benchmarks with ``vllm bench
serve --backend openai-chat --endpoint /v1/chat/completions``, which counts the dataset's tokens, not
these): the harmony system message ("You are ChatGPT, a large language model trained by OpenAI.",
knowledge cutoff, current date, "Reasoning: medium", "# Valid channels: analysis, commentary,
final. Channel must be included for every message.", ~57 tokens), the start/role/message/end
markers of the system and user turns (8) and the assistant header (2). Counted by hand in o200k
(no tokenizer here): +-5 tokens."""


def burst(model: str, gpu: str, quant: str, tp: int, n: int, pin: int, pout: int, chunk: int,
           lengths: list[tuple[int, int]] | None = None, pp: int = 1, sync: bool = False,
           kv_fraction: float = 1.0, prompt_extra: int = 0, batch_cap: int = 1024, send_gap_s: float = 0.0,
           ttft_floor_s: float = 0.0) -> dict:
    """``n`` requests of fixed lengths (or ``lengths``) at t=0 on one replica (``vllm bench serve`` /
    ``bench throughput`` with an infinite rate): vLLM V1 chunked prefill (``chunk`` =
    max_num_batched_tokens), ``batch_cap`` seqs (vLLM's default on >= 70 GiB GPUs but A100s: 1,024;
    A100: 256); ``sync``: see :func:`engine`; ``prompt_extra``: tokens the
    server adds to every prompt (a chat template), simulated but not credited to the throughput;
    ``kv_fraction``: the replica's KV budget on top of the execution model's 0.9 utilisation (1.0:
    all the KV memory vLLM's rule leaves, as vLLM has it); ``send_gap_s``: a counterfactual
    single-server front end (``gpt_oss_bursts.frontend_rows``): request i reaches the engine at
    ``(i + 1) * send_gap_s``, its TTFT counted from the burst's send at t=0 as the client counts it;
    ``ttft_floor_s``: a counterfactual that holds every first token until then (an API server that
    streams no output until it has taken in the whole burst)."""
    lengths = lengths or [(pin, pout)] * n
    reqs = [Request(req_id=i, arrival_s=(i + 1) * send_gap_s, prompt_tokens=p + prompt_extra, output_tokens=o)
            for i, (p, o) in enumerate(lengths)]
    rc = ReplicaConfig(model=model, gpu=gpu, quantization=quant, tensor_parallel=tp, scheduler="sarathi",
                       chunk_size=chunk, batch_cap=batch_cap, pipeline_parallel=pp, kv_budget_fraction=kv_fraction)
    c = Cluster(ClusterConfig(replica=rc, num_replicas=1, router="round_robin"), rng=np.random.default_rng(0),
                execution_model=engine(model, gpu, quant, tp, pp, sync))
    c.submit(reqs)
    c.drain()
    r = c.results()
    ok = ~r["rejected"]
    dur = float(np.max(r["completion_s"][ok]))
    gaps = r["completion_s"][ok] - r["first_token_s"][ok]  # each request's decode, over its gaps:
    ttft = np.maximum(r["ttft_s"][ok] + r["arrival_s"][ok], ttft_floor_s)  # from the burst's send (t=0)
    n_gaps = np.maximum(np.array([o for _p, o in lengths])[ok] - 1, 0)  # the token-weighted mean gap
    return {"total": sum(p + o for p, o in lengths) / dur, "tpot_ms": 1e3 * float(np.nanmean(r["tpot_s"][ok])),
            "tpot_p50_ms": 1e3 * float(np.nanmedian(r["tpot_s"][ok])),
            "itl_ms": 1e3 * float(gaps.sum() / max(1, n_gaps.sum())),
            "ttft_s": float(np.mean(ttft)), "ttft_p50_s": float(np.median(ttft)),
            "ttft_p99_s": float(np.percentile(ttft, 99))}
