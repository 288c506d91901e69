"""ShareGPT request lengths as ``vllm bench serve --dataset-name sharegpt`` sends them (seed 0).

vLLM's ShareGPT sampler shuffles ShareGPT V3 with seed 0 and keeps, in order, the conversations that
pass its filter (``is_valid_sequence``: prompt and completion >= 4 tokens, prompt <= 1,024, prompt +
completion <= 2,048); the first N of an N'-prompt run (N < N') are the same conversations. Each
request asks for the completion's length (``max_tokens``). LambdaLabs' vLLM benchmark logged the
first 320 of them per request (``benchmarks/data/lambda_vllm054_sharegpt_lengths.json``, Llama-3
tokenizer): the prompt lengths, and the lengths Llama-3 generated, which stop early at its own EOS,
so the longest of the three logged 320-prompt runs stands in for each request's ``max_tokens``
(a model that runs to ``max_tokens``, as gpt-oss's reasoning does, generates that many).

Why it matters: a burst's request-weighted mean TPOT is set by its short outputs (their few tokens
all fall in the prefill phase's long steps); in this sample 21 % of the outputs are under 20 tokens
and 36 % under 50 (a lognormal of log-sd 0.8 with the same mean has none under 10 and 8 % under 50).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "lambda_vllm054_sharegpt_lengths.json"
RUNS_320 = ("h100-320", "a100-320", "h100-70b-tp4-320")
"""Lambda's runs of the 320-prompt sample (same prompts; generated lengths differ run to run)."""


def seed0_pairs() -> tuple[np.ndarray, np.ndarray]:
    """The 320 (prompt, max_tokens) pairs in vLLM's seed-0 order; 0 where no run received text."""
    with open(DATA) as f:
        runs = json.load(f)["runs"]
    prompts = np.array(runs[RUNS_320[0]]["input_lens"], dtype=int)
    for k in RUNS_320[1:]:
        if runs[k]["input_lens"] != runs[RUNS_320[0]]["input_lens"]:
            raise ValueError(f"{DATA}: run {k} has other prompts than {RUNS_320[0]}")
    outputs = np.max([runs[k]["output_lens"] for k in RUNS_320], axis=0).astype(int)
    return prompts, outputs


def sharegpt_burst(n: int, input_total: int, output_total: int, seed: int = 0) -> list[tuple[int, int]]:
    """``n`` (prompt, output) pairs: the seed-0 sample in order (its first 320), then pairs drawn with
    replacement from it (``seed``); a pair no Lambda run received text for (17 of 320: Llama-3 ended
    at once) is replaced by a draw. Both lengths are then scaled to the run's published totals
    (``input_total``, ``output_total``; the run's own tokenizer counts a little differently)."""
    if n < 1 or input_total < n or output_total < n:
        raise ValueError(f"need n >= 1 and totals >= n, got n={n}, totals {input_total} / {output_total}")
    prompts, outputs = seed0_pairs()
    rng = np.random.default_rng(seed)
    pool = np.flatnonzero(outputs > 0)
    idx = np.arange(min(n, len(prompts)))
    idx = np.concatenate([idx, rng.choice(pool, n - len(idx))]) if n > len(idx) else idx
    bad = outputs[idx] == 0
    idx[bad] = rng.choice(pool, int(bad.sum()))
    p, o = prompts[idx].astype(float), outputs[idx].astype(float)
    p = np.maximum(1, np.rint(p * input_total / p.sum())).astype(int)
    o = np.maximum(1, np.rint(o * output_total / o.sum())).astype(int)
    return list(zip(p.tolist(), o.tolist()))
