"""GPUStack's gpt-oss-120b ShareGPT bursts on H100 (TP1, TP2, TP4, PP2) against the simulator.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/models_memory.py --part ttft   # TTFT table
    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/models_memory.py --part pp     # TPOT / throughput table

Source: GPUStack performance lab, "Optimizing GPT-OSS-120B Throughput on NVIDIA H100 GPUs"
(gpustack/gpustack ``docs/performance-lab/gpt-oss-120b/h100.md``): 2 x H100 SXM on one node, vLLM
v0.10.2, ``vllm serve openai/gpt-oss-120b --max-model-len 32768 [--async-scheduling] [-tp N | -pp 2]``,
``vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt
--num-prompts 1000`` (all at once, seed 0, greedy: the client sends temperature 0 when none is given).
Requests: ``sharegpt_sample.sharegpt_burst`` (vLLM's seed-0 ShareGPT sample, scaled to each run's
token totals) and, for comparison, the lognormal lengths of log-sd 0.8 used before
(``burst_runs.sharegpt_like``), each prompt with gpt-oss's harmony tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from sharegpt_sample import sharegpt_burst

INPUT_TOKENS = 215_312
"""Prompt tokens of the 1,000 ShareGPT requests (every run's log)."""


@dataclass(frozen=True)
class Run:
    """One published run: its parallelism, scheduling and the benchmark's figures."""

    tp: int
    pp: int
    sync: bool
    output_tokens: int
    """Generated tokens (the run's log; without ``--ignore-eos`` they differ a little run to run)."""
    total_tok_s: float
    duration_s: float
    ttft_s: tuple[float, float, float]
    """Mean, median, p99."""
    tpot_ms: tuple[float, float, float]
    """Mean, median, p99 (per request: (latency - TTFT) / (tokens - 1))."""
    itl_ms: float
    """Mean inter-token latency over every streamed chunk of every request."""


RUNS = {
    "TP1 sync": Run(1, 1, True, 195_544, 6095.37, 67.40, (24.830, 25.973, 54.033), (54.10, 47.57, 193.25), 46.65),
    "TP1 async": Run(1, 1, False, 187_289, 6325.41, 63.65, (23.630, 24.595, 51.019), (52.66, 46.51, 182.00), 45.31),
    "TP2 async": Run(2, 1, False, 196_205, 16042.19, 25.65, (4.613, 4.600, 7.587), (86.54, 51.57, 215.21), 43.02),
    "TP4 async": Run(4, 1, False, 196_174, 23759.49, 17.32, (2.952, 2.871, 4.867), (55.77, 34.49, 136.33), 28.57),
    "PP2 async": Run(1, 2, False, 196_089, 11198.56, 36.74, (4.472, 4.393, 6.961), (115.37, 69.62, 371.01), 60.87),
}


def simulate(name: str, lengths: str = "sharegpt", send_gap_s: float = 0.0) -> dict:
    """The run ``name`` simulated with ``lengths`` ``sharegpt`` (the seed-0 sample) or ``lognormal``;
    ``send_gap_s``: a counterfactual single-server front end (:func:`frontend_rows`)."""
    import burst_runs as mm

    r = RUNS[name]
    pairs = (sharegpt_burst(1000, INPUT_TOKENS, r.output_tokens) if lengths == "sharegpt"
             else mm.sharegpt_like(1000, 0.8))
    return mm.burst("gpt-oss-120b", "h100-80gb", "mxfp4", r.tp, 1000, 0, 0, 8192, pairs, pp=r.pp, sync=r.sync,
                     prompt_extra=mm.HARMONY_PROMPT_TOKENS, send_gap_s=send_gap_s)


def _err(sim: float, pub: float) -> str:
    return f"{100 * (sim / pub - 1):+.0f}%"


def _row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def ttft_rows() -> None:
    """Mean / median / p99 TTFT: published beside simulated (ShareGPT sample; lognormal mean)."""
    print(_row("config", "published mean / median / p99 s", "simulated (ShareGPT sample)", "error of the mean",
               "error of the p99", "lognormal log-sd 0.8: mean (error)"))
    print(_row(*["---"] * 6))
    for name, r in RUNS.items():
        s, ln = simulate(name), simulate(name, "lognormal")
        print(_row(name, " / ".join(f"{x:.2f}" for x in r.ttft_s),
                   f"{s['ttft_s']:.2f} / {s['ttft_p50_s']:.2f} / {s['ttft_p99_s']:.2f}",
                   _err(s["ttft_s"], r.ttft_s[0]), _err(s["ttft_p99_s"], r.ttft_s[2]),
                   f"{ln['ttft_s']:.2f} ({_err(ln['ttft_s'], r.ttft_s[0])})"))


def pp_rows() -> None:
    """Throughput, TPOT and ITL of every run, and each parallel run's gain over TP1 (asynchronous)."""
    print(_row("config", "published tok/s / mean / median TPOT ms / mean ITL ms",
               "simulated (ShareGPT sample)", "error of the mean TPOT", "error of the median TPOT",
               "error of the ITL", "gain over TP1 published / simulated", "lognormal log-sd 0.8: mean TPOT (error)"))
    print(_row(*["---"] * 8))
    sims = {n: simulate(n) for n in RUNS}
    base_p, base_s = RUNS["TP1 async"].total_tok_s, sims["TP1 async"]["total"]
    for name, r in RUNS.items():
        s, ln = sims[name], simulate(name, "lognormal")
        print(_row(name, f"{r.total_tok_s:,.0f} / {r.tpot_ms[0]:.1f} / {r.tpot_ms[1]:.1f} / {r.itl_ms:.1f}",
                   f"{s['total']:,.0f} / {s['tpot_ms']:.1f} / {s['tpot_p50_ms']:.1f} / {s['itl_ms']:.1f}",
                   _err(s["tpot_ms"], r.tpot_ms[0]), _err(s["tpot_p50_ms"], r.tpot_ms[1]),
                   _err(s["itl_ms"], r.itl_ms),
                   f"{r.total_tok_s / base_p:.2f}x / {s['total'] / base_s:.2f}x",
                   f"{ln['tpot_ms']:.1f} ({_err(ln['tpot_ms'], r.tpot_ms[0])})"))


def decode_step_rows(batch: int = 1000, context: int = 330) -> None:
    """One decode step of ``batch`` sequences at ``context`` tokens (the bursts' batch once every
    prompt is in: 282 prompt + harmony tokens and ~50 generated), term by term, TP1 / TP2 / TP4 (ms)."""
    import burst_runs as mm

    print(_row("term (ms)", "TP1", "TP2", "TP4"))
    print(_row(*["---"] * 4))
    cols = []
    for tp in (1, 2, 4):
        m = mm.engine("gpt-oss-120b", "h100-80gb", "mxfp4", tp)
        k = m._replace(engine_overhead=False)
        ops = k.layer_op_times_s(batch)
        L, n_moe = k.model.num_layers, k.model.moe_layers
        cols.append({
            "MoE layers (experts, router, fixed)": n_moe * k._moe.layer_time_s(batch),
            "all-reduces (2 a layer)": L * ops["all_reduce"],
            "QKV + O GEMMs": L * (ops["attn_pre_proj"] + ops["attn_post_proj"]),
            "attention (KV reads, per-sequence terms)": L * k.kernel.attn_decode_floor_s
            + L * k._attn_dec_per_seq * batch + k._sw_decode_s(1, batch) + k._full_layers * k._attn_decode_slope(1) * batch * context,
            "kernels in all (+ norms, LM head)": k.decode_step_time_s(batch, context),
            "sampler (top-p sort priced, GPU)": m._gpu_seq * batch,
            "other GPU time outside kernels": m._gpu_ovh,
            "CPU (hidden under async scheduling)": m._ovh_fixed + m._ovh_seq * batch,
            "step": m.decode_step_time_s(batch, context),
        })
    for term in cols[0]:
        print(_row(term, *(f"{1e3 * c[term]:.1f}" for c in cols)))


GREEDY_SAMPLER_S_PER_LOGIT = 4.47e-12
"""A greedy sampler's GPU time per sequence and vocabulary entry (vLLM V1's sampler returns the
argmax for an all-greedy batch), measured on a lent H100: the slope of the sweep's 24 graph-replayed
greedy rows (``benchmarks/sampler_fit.py``; 18.5 us + 4.47e-12 s a logit, rows within 6 % median,
47 % at most at batch 1). Was 10 B a logit at 3.0 TB/s (3.33e-12, an estimate: the BF16 logits read,
their FP32 copy written and read by the argmax)."""


def greedy_rows() -> None:
    """Counterfactual: every run with the sampler priced greedy (GPUStack's requests are greedy; the
    ``vllm-v1`` profile prices vLLM's top-p sort): the ITL and TPOT it leaves, and so the per-forward
    cost the model lacks at large batch (docs/bench/models_memory.md, sixth session)."""
    import dataclasses

    import burst_runs as mm

    real = mm.engine

    def greedy(model, gpu, quant, tp=1, pp=1, sync=False):
        m = real(model, gpu, quant, tp, pp, sync)
        return m._replace(engine=dataclasses.replace(m.engine, sampler_s_per_logit=GREEDY_SAMPLER_S_PER_LOGIT))

    print(_row("config (sampler priced greedy)", "mean / median TPOT ms", "mean ITL ms", "error of the mean TPOT",
               "error of the ITL", "ITL short by ms"))
    print(_row(*["---"] * 6))
    mm.engine = greedy
    try:
        for name, r in RUNS.items():
            s = simulate(name)
            print(_row(name, f"{s['tpot_ms']:.1f} / {s['tpot_p50_ms']:.1f}", f"{s['itl_ms']:.1f}",
                       _err(s["tpot_ms"], r.tpot_ms[0]), _err(s["itl_ms"], r.itl_ms), f"{r.itl_ms - s['itl_ms']:.1f}"))
    finally:
        mm.engine = real


A100_RUNS = {
    "TP1 sync": Run(1, 1, True, 196_656, 4768.75, 86.39, (25.919, 0.0, 59.732), (97.57, 90.70, 0.0), 86.67),
    "TP1 async": Run(1, 1, False, 195_312, 4986.20, 82.35, (24.787, 0.0, 56.631), (92.70, 86.19, 0.0), 82.31),
    "TP2 async": Run(2, 1, False, 196_156, 7897.72, 52.10, (16.191, 0.0, 36.099), (57.98, 53.39, 0.0), 51.20),
}
"""Out of sample: GPUStack's same ShareGPT bursts on 2 x A100 SXM 80GB (``docs/performance-lab/
gpt-oss-120b/a100.md``, vLLM 0.10.2; Marlin MXFP4 on SM80; vLLM's A100 defaults: 256 sequences,
2,048 batched tokens). Medians of TTFT and p99s of TPOT are not used (0.0)."""


def a100_rows() -> None:
    """The A100 bursts (out of sample; not an issue row)."""
    import burst_runs as mm

    print(_row("A100 config", "published tok/s / mean / median TPOT ms / ITL ms / mean TTFT s", "simulated",
               "error of the mean TPOT", "error of the ITL", "error of the mean TTFT"))
    print(_row(*["---"] * 6))
    for name, r in A100_RUNS.items():
        s = mm.burst("gpt-oss-120b", "a100-80gb", "mxfp4", r.tp, 1000, 0, 0, 2048,
                      sharegpt_burst(1000, INPUT_TOKENS, r.output_tokens), sync=r.sync,
                      prompt_extra=mm.HARMONY_PROMPT_TOKENS, batch_cap=256)
        print(_row(name, f"{r.total_tok_s:,.0f} / {r.tpot_ms[0]:.1f} / {r.tpot_ms[1]:.1f} / {r.itl_ms:.1f} / {r.ttft_s[0]:.1f}",
                   f"{s['total']:,.0f} / {s['tpot_ms']:.1f} / {s['tpot_p50_ms']:.1f} / {s['itl_ms']:.1f} / {s['ttft_s']:.1f}",
                   _err(s["tpot_ms"], r.tpot_ms[0]), _err(s["itl_ms"], r.itl_ms), _err(s["ttft_s"], r.ttft_s[0])))


FRONTEND_GAPS_MS = (0.0, 2.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0)
"""Service times per request of the counterfactual single-server front end (ms)."""


def frontend_rows(runs: tuple[str, ...] = ("TP1 async", "TP2 async", "TP4 async", "PP2 async")) -> None:
    """The TTFT offset and a shape test of the API-server hypothesis (docs/bench/models_memory.md,
    sixth session, "The TTFT offset: the API-server hypothesis tested"). First table: published minus
    simulated mean / median / p99 TTFT, and the spreads p99 - mean. Second: every request passes one
    FIFO server of ``s`` ms a request (vLLM's one API-server process; request i reaches the engine
    at (i + 1) s) before the engine; TTFT counted from the burst's send. A counterfactual, not a
    model term: no published figure gives ``s`` for vLLM 0.10.2's chat path."""
    print(_row("config", "published - simulated mean / median / p99 TTFT s", "spread p99 - mean published / simulated s"))
    print(_row(*["---"] * 3))
    base = {n: simulate(n) for n in runs}
    for n in runs:
        r, s = RUNS[n], base[n]
        print(_row(n, f"{r.ttft_s[0] - s['ttft_s']:+.2f} / {r.ttft_s[1] - s['ttft_p50_s']:+.2f} / "
                      f"{r.ttft_s[2] - s['ttft_p99_s']:+.2f}",
                   f"{r.ttft_s[2] - r.ttft_s[0]:.2f} / {s['ttft_p99_s'] - s['ttft_s']:.2f}"))
    print()
    print(_row("config: error of mean / p99 TTFT with a front end of s ms a request",
               *(f"s = {g:g}" for g in FRONTEND_GAPS_MS), "s nearest the published mean: p99 error"))
    print(_row(*["---"] * (len(FRONTEND_GAPS_MS) + 2)))
    for n in runs:
        r = RUNS[n]
        sims = [base[n] if g == 0.0 else simulate(n, send_gap_s=g * 1e-3) for g in FRONTEND_GAPS_MS]
        means = [x["ttft_s"] for x in sims]
        best = min(range(len(sims)), key=lambda i: abs(means[i] / r.ttft_s[0] - 1))
        nearest = (f"{FRONTEND_GAPS_MS[best]:g} ms: mean {_err(sims[best]['ttft_s'], r.ttft_s[0])}, "
                   f"p99 {_err(sims[best]['ttft_p99_s'], r.ttft_s[2])}") if max(means) > 1.01 * min(means) else "none moves it"
        print(_row(n, *(f"{_err(x['ttft_s'], r.ttft_s[0])} / {_err(x['ttft_p99_s'], r.ttft_s[2])}" for x in sims), nearest))


SHORT_RUNS = {
    "TP1 sync": (1, True, (4.850, 4.987, 7.373)),
    "TP2 async": (2, False, (2.800, 2.412, 3.857)),
}
"""GPUStack's 1,000 x 128/4 random bursts through the same chat endpoint and server (the H100 page's
"Other Benchmark Cases": the baseline ``vllm serve`` at TP1 and the optimized ``--async-scheduling
-tp 2``; 127,755 prompt tokens, 4,000 generated): (tp, synchronous, TTFT mean / median / p99 s)."""

FLOORS_S = (0.0, 1.0, 2.0, 2.5, 3.0)
"""Counterfactual first-token floors (s): no first token reaches the client before then."""


def short_rows() -> None:
    """The 1,000-request bursts with 4 output tokens (no streaming to share the API server) beside
    the ShareGPT bursts: the published TTFT against the simulated, with the FIFO front end of
    :func:`frontend_rows` at 4 ms and a first-token floor (every first token held until the API
    server has taken in the burst): which shape the published distributions have."""
    import burst_runs as mm

    print(_row("burst", "published mean / median / p99 TTFT s", "simulated",
               "error mean / median / p99", "front end 4 ms: error mean / p99",
               *(f"floor {f:g} s: error mean / median / p99" for f in FLOORS_S[1:])))
    print(_row(*["---"] * (5 + len(FLOORS_S) - 1)))

    def runs():
        for name, (tp, sync, pub) in SHORT_RUNS.items():
            yield f"1,000 x 128/4 {name}", pub, lambda tp=tp, sync=sync, **k: mm.burst(
                "gpt-oss-120b", "h100-80gb", "mxfp4", tp, 1000, 128, 4, 8192, sync=sync,
                prompt_extra=mm.HARMONY_PROMPT_TOKENS, **k)
        for name in ("TP2 async", "TP4 async", "PP2 async"):
            yield f"1,000 ShareGPT {name}", RUNS[name].ttft_s, lambda n=name, **k: _sharegpt(n, **k)

    for label, pub, sim in runs():
        s, q = sim(), sim(send_gap_s=4e-3)

        def errs(x, keys=("ttft_s", "ttft_p50_s", "ttft_p99_s"), p=pub):
            return " / ".join(_err(x[k], v) for k, v in zip(keys, p) if k)

        print(_row(label, " / ".join(f"{x:.2f}" for x in pub),
                   f"{s['ttft_s']:.2f} / {s['ttft_p50_s']:.2f} / {s['ttft_p99_s']:.2f}", errs(s),
                   f"{_err(q['ttft_s'], pub[0])} / {_err(q['ttft_p99_s'], pub[2])}",
                   *(errs(sim(ttft_floor_s=f)) for f in FLOORS_S[1:])))


def _sharegpt(name: str, **kw) -> dict:
    """The ShareGPT run ``name`` with :func:`burst_runs.burst`'s counterfactual keywords."""
    import burst_runs as mm

    r = RUNS[name]
    return mm.burst("gpt-oss-120b", "h100-80gb", "mxfp4", r.tp, 1000, 0, 0, 8192,
                     sharegpt_burst(1000, INPUT_TOKENS, r.output_tokens), pp=r.pp, sync=r.sync,
                     prompt_extra=mm.HARMONY_PROMPT_TOKENS, **kw)
