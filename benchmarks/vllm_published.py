"""Published load-latency figures of vLLM, replayed on the simulator (measured vs simulated, signed errors).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/vllm_published.py [--profiles vllm-v1 vllm-2023]
        [--seed 0] [--json out.json]

Sources (the numbers below are copied from them; each row names its source):

- ``sglang-vllm060``: SGLang's reproduction of vLLM v0.6.0 against SGLang v0.3.0,
  https://github.com/sgl-project/sglang/blob/main/benchmark/benchmark_vllm_060/README.md (Sept 2024).
  vLLM v0.6.0 with ``--num-scheduler-steps 10 --max_model_len 4096`` (V0 engine, multi-step scheduling,
  no chunked prefill at that context length, no prefix caching), client ``sglang.bench_serving
  --backend vllm --dataset-name sharegpt`` at Poisson ``--request-rate`` 4 (1200 prompts) and 8 (2400
  prompts); Llama-3.1-8B-Instruct on 1x A100-80GB and Llama-3.1-70B-Instruct on 4x H100-80GB (TP4).
  Published: median E2E latency, median TTFT, median TPOT, median ITL (ms). The ITL of a multi-step
  engine is the gap between bursts of 10 tokens, so TPOT is the figure compared here.
- ``lambda-vllm054``: Lambda's vLLM benchmark, https://github.com/LambdaLabsML/vllm-benchmark
  (result files ``results/prompt_N/{1xH100-80GB-SXM,1xA100-80GB-SXM,4xH100-80GB-SXM}/
  Meta-Llama-3-{8B,70B}-Instruct_tp{1,4}_len{2048,2000}.json``, run 2024-09-07, docker image
  ``vllm/vllm-openai:v0.5.4``: the V0 engine before the v0.6 CPU-overhead work).
  ``--max-model-len 2048 --max-num-seqs 1024 --gpu-memory-utilization 0.95``, vLLM's
  ``benchmark_serving.py`` on ShareGPT V3 (seed 0), all N = 10 / 80 / 320 prompts sent at once
  (``--request-rate inf``): a burst, so the load is N. Published: mean TTFT, mean TPOT, mean E2E (ms).
  The files list every request's prompt and generated lengths; they are replayed exactly
  (``benchmarks/data/lambda_vllm054_sharegpt_lengths.json``).
- ``do-vllm0141``: DigitalOcean's vLLM baseline for its GTC 2026 Dynamo demo,
  https://github.com/DO-Solutions/gtc-2026-doks/blob/main/dev/vllm/benchmarks/phase0/20260224-185458/report.md
  (2026-02-24). vLLM 0.14.1 (V1 engine: async scheduling, full + piecewise CUDA graphs, chunked prefill
  with ``max_num_batched_tokens`` 8192, prefix caching on), 1x H200 141GB, Llama-3.1-70B-Instruct FP8
  (ModelOpt) with an FP8 KV cache, ``vllm bench serve`` on ShareGPT V3 (300 prompts, the same seed-0
  sample as Lambda's: their first 300 prompts sum to the report's 62,238 input tokens), Poisson at
  0.5-3 req/s. Published: p50 TTFT, TPOT, ITL (ms) per rate; here rates 1, 2, 3 (0.5 is a cold-cache
  artifact by the report's own note). Replayed with the ``int8`` tier (W8A8 at the INT8/FP8 tensor-core
  rate, one byte per weight); the KV cache stays 16-bit in the simulator (a few % of a decode step at
  these lengths); outputs: Lambda's Llama-3-8B H100 generated lengths of the same 300 prompts (60,717
  tokens; the report: 59,105-59,704).

Replay: the same model / GPU / TP preset (Llama-3.1 has Llama-3's shape), one replica, the defaults
of the vLLM version: V0 rows ``scheduler="vllm"`` (prefill-first, whole prompts up to
``max_num_batched_tokens`` = max(max_model_len, 2048), no decodes in a prefill iteration), the V1 rows
``scheduler="sarathi"`` with an 8192-token chunk; ``batch_cap`` = max_num_seqs; prefix caching off
(ShareGPT prompts share no prefixes). Lengths: the Lambda runs use their own per-request lengths, the
DigitalOcean runs the first 300 pairs of the 320-request Lambda ShareGPT sample, in order; the SGLang
runs (ShareGPT with the same filter, Llama-3 tokenizer, lengths not published) draw pairs with
replacement from that sample (mean 205 in / 204 out; vLLM's v0.6.0 blog states 202 / 179 for its
500-prompt sample). Arrivals: Poisson at the rate, or all at t = 0 (Lambda). The V0 rows run
``vllm-v0``: synchronous steps, the API server in the engine's process (``api_server_per_request_s``,
the one constant fitted here, on Lambda's three 8B H100 bursts: ``--fit-api-server``) and, for the
v0.6.0 rows, multi-step scheduling with the published ``--num-scheduler-steps 10``
(``ReplicaConfig.num_scheduler_steps``). Not modelled: v0.6.0's API server is its own process (its
per-request work is charged as v0.5's, in the engine's), detokenisation and streaming, the client. A request the client saw no text for (generated length 0)
is simulated with one output token and counts TTFT 0 and no TPOT, as the client counted it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request

DATA = Path(__file__).resolve().parent / "data" / "lambda_vllm054_sharegpt_lengths.json"
SHAREGPT_POOL = "h100-320"
"""The Lambda run whose 320 (prompt, generated) pairs stand in for ShareGPT lengths in the SGLang
(resampled) and DigitalOcean (its first 300, the same prompts) rows."""

SOURCES: dict[str, dict] = {
    "sglang-vllm060": {
        "url": "https://github.com/sgl-project/sglang/blob/main/benchmark/benchmark_vllm_060/README.md",
        "date": "2024-09", "engine": "vLLM v0.6.0, --num-scheduler-steps 10, max_model_len 4096",
        "dataset": "ShareGPT (sglang.bench_serving default sampling), Poisson arrivals",
        "stat": "median", "max_tokens_per_iter": 4096, "batch_cap": 256, "scheduler_steps": 10,
        "lengths": "resample", "v1_as": "vllm-v0"},
    "lambda-vllm054": {
        "url": "https://github.com/LambdaLabsML/vllm-benchmark",
        "date": "2024-09-07", "engine": "vLLM v0.5.4 (vllm/vllm-openai:v0.5.4), max_model_len 2048, max_num_seqs 1024",
        "dataset": "ShareGPT V3 (benchmark_serving.py, seed 0), N prompts at once",
        "stat": "mean", "max_tokens_per_iter": 2048, "batch_cap": 1024, "scheduler_steps": 1,
        "lengths": "exact", "v1_as": "vllm-v0"},
    "do-vllm0141": {
        "url": "https://github.com/DO-Solutions/gtc-2026-doks/blob/main/dev/vllm/benchmarks/phase0/20260224-185458/report.md",
        "date": "2026-02-24", "engine": "vLLM 0.14.1 (V1), chunked prefill 8192, FP8 weights and KV cache, prefix caching on",
        "dataset": "ShareGPT V3 (vllm bench serve, seed 0, 300 prompts), Poisson arrivals",
        "stat": "median", "scheduler": "sarathi", "chunk_size": 8192, "batch_cap": 1024, "scheduler_steps": 1,
        "quantization": "int8", "lengths": "pool-prefix"},
}


@dataclass(frozen=True, kw_only=True)
class PublishedRow:
    """One published load point of vLLM."""

    source: str
    """Key of ``SOURCES``."""
    model: str
    """Simulator model preset with the published model's shape."""
    gpu: str
    """Simulator GPU preset."""
    tp: int
    """Tensor-parallel degree."""
    load: str
    """``poisson`` (``rate_rps`` requests per second) or ``burst`` (all ``num_prompts`` at t = 0)."""
    rate_rps: float
    """Poisson arrival rate in requests per second (0 for a burst)."""
    num_prompts: int
    """Requests in the run."""
    ttft_ms: float
    """Published TTFT (the source's statistic, ``SOURCES[source]['stat']``), ms."""
    tpot_ms: float
    """Published TPOT (time per output token after the first), ms."""
    e2e_ms: float | None = None
    """Published end-to-end latency, ms (None where the source gives none)."""

    @property
    def load_level(self) -> float:
        """What orders a source's load points: the rate, or the burst size."""
        return self.rate_rps if self.load == "poisson" else float(self.num_prompts)


ROWS: tuple[PublishedRow, ...] = (
    # SGLang's vLLM v0.6.0 table: median E2E / TTFT / TPOT (ms)
    PublishedRow(source="sglang-vllm060", model="llama-3-8b", gpu="a100-80gb", tp=1, load="poisson",
                 rate_rps=4.0, num_prompts=1200, ttft_ms=100.48, tpot_ms=14.14, e2e_ms=1691.97),
    PublishedRow(source="sglang-vllm060", model="llama-3-8b", gpu="a100-80gb", tp=1, load="poisson",
                 rate_rps=8.0, num_prompts=2400, ttft_ms=120.39, tpot_ms=17.09, e2e_ms=2137.16),
    PublishedRow(source="sglang-vllm060", model="llama-3-70b", gpu="h100-80gb", tp=4, load="poisson",
                 rate_rps=4.0, num_prompts=1200, ttft_ms=179.15, tpot_ms=23.58, e2e_ms=2915.60),
    PublishedRow(source="sglang-vllm060", model="llama-3-70b", gpu="h100-80gb", tp=4, load="poisson",
                 rate_rps=8.0, num_prompts=2400, ttft_ms=207.12, tpot_ms=29.15, e2e_ms=3752.38),
    # Lambda's vLLM v0.5.4 result files: mean TTFT / TPOT / latency (ms)
    PublishedRow(source="lambda-vllm054", model="llama-3-8b", gpu="h100-80gb", tp=1, load="burst",
                 rate_rps=0.0, num_prompts=10, ttft_ms=62.43, tpot_ms=11.11, e2e_ms=1431.78),
    PublishedRow(source="lambda-vllm054", model="llama-3-8b", gpu="h100-80gb", tp=1, load="burst",
                 rate_rps=0.0, num_prompts=80, ttft_ms=535.98, tpot_ms=18.66, e2e_ms=2186.85),
    PublishedRow(source="lambda-vllm054", model="llama-3-8b", gpu="h100-80gb", tp=1, load="burst",
                 rate_rps=0.0, num_prompts=320, ttft_ms=1628.51, tpot_ms=45.83, e2e_ms=5248.09),
    PublishedRow(source="lambda-vllm054", model="llama-3-70b", gpu="h100-80gb", tp=4, load="burst",
                 rate_rps=0.0, num_prompts=10, ttft_ms=112.52, tpot_ms=20.44, e2e_ms=3865.97),
    PublishedRow(source="lambda-vllm054", model="llama-3-70b", gpu="h100-80gb", tp=4, load="burst",
                 rate_rps=0.0, num_prompts=80, ttft_ms=867.30, tpot_ms=53.75, e2e_ms=4816.93),
    PublishedRow(source="lambda-vllm054", model="llama-3-70b", gpu="h100-80gb", tp=4, load="burst",
                 rate_rps=0.0, num_prompts=320, ttft_ms=2764.06, tpot_ms=88.09, e2e_ms=10044.22),
    PublishedRow(source="lambda-vllm054", model="llama-3-8b", gpu="a100-80gb", tp=1, load="burst",
                 rate_rps=0.0, num_prompts=10, ttft_ms=139.23, tpot_ms=17.95, e2e_ms=2407.07),
    PublishedRow(source="lambda-vllm054", model="llama-3-8b", gpu="a100-80gb", tp=1, load="burst",
                 rate_rps=0.0, num_prompts=80, ttft_ms=1217.68, tpot_ms=47.31, e2e_ms=4429.17),
    PublishedRow(source="lambda-vllm054", model="llama-3-8b", gpu="a100-80gb", tp=1, load="burst",
                 rate_rps=0.0, num_prompts=320, ttft_ms=3423.17, tpot_ms=101.46, e2e_ms=10857.28),
    # DigitalOcean's vLLM 0.14.1 (V1) ShareGPT sweep on one H200: p50 TTFT / TPOT (ms)
    PublishedRow(source="do-vllm0141", model="llama-3-70b", gpu="h200-141gb", tp=1, load="poisson",
                 rate_rps=1.0, num_prompts=300, ttft_ms=56.5, tpot_ms=20.4),
    PublishedRow(source="do-vllm0141", model="llama-3-70b", gpu="h200-141gb", tp=1, load="poisson",
                 rate_rps=2.0, num_prompts=300, ttft_ms=60.2, tpot_ms=20.8),
    PublishedRow(source="do-vllm0141", model="llama-3-70b", gpu="h200-141gb", tp=1, load="poisson",
                 rate_rps=3.0, num_prompts=300, ttft_ms=64.2, tpot_ms=21.5),
)


def run_key(row: PublishedRow) -> str:
    """Key of a Lambda run in ``DATA``: ``<gpu>[-70b-tp4]-<N>``."""
    return f"{row.gpu.split('-')[0]}{'-70b-tp4' if row.model == 'llama-3-70b' else ''}-{row.num_prompts}"


def burst_lengths(key: str) -> tuple[list[int], list[int]]:
    """Per-request (prompt, generated) lengths of the Lambda run ``key``."""
    with open(DATA) as f:
        runs = json.load(f)["runs"]
    if key not in runs:
        raise KeyError(f"no Lambda run {key!r} in {DATA}; have {sorted(runs)}")
    return runs[key]["input_lens"], runs[key]["output_lens"]


def row_requests(row: PublishedRow, seed: int) -> tuple[list[Request], np.ndarray]:
    """The run's requests and a mask of those the client saw text for (generated length > 0)."""
    how = SOURCES[row.source]["lengths"]
    rng = np.random.default_rng(seed)
    if how == "exact":  # the run's own per-request lengths, all at t = 0
        ins, outs = burst_lengths(run_key(row))
        arrivals = np.zeros(len(ins))
    else:
        ins_pool, outs_pool = burst_lengths(SHAREGPT_POOL)
        if how == "pool-prefix":  # the same seed-0 ShareGPT sample, in order
            ins, outs = ins_pool[:row.num_prompts], outs_pool[:row.num_prompts]
        else:  # "resample": pairs drawn with replacement
            idx = rng.integers(0, len(ins_pool), size=row.num_prompts)
            ins, outs = [ins_pool[i] for i in idx], [outs_pool[i] for i in idx]
        arrivals = np.cumsum(rng.exponential(1.0 / row.rate_rps, size=row.num_prompts))
    reqs = [Request(req_id=i, arrival_s=float(a), prompt_tokens=int(p), output_tokens=max(int(o), 1))
            for i, (a, p, o) in enumerate(zip(arrivals, ins, outs))]
    return reqs, np.array(outs) > 0


def engine_profile_for(row: PublishedRow, profile: str) -> str:
    """The engine profile a row is replayed with: ``vllm-v1`` stands for the vLLM of the source's
    date, so the V0-engine sources (v0.5.4, v0.6.0: synchronous steps, no separate API-server
    process) run ``vllm-v0`` (``SOURCES[...]['v1_as']``); any other profile as asked."""
    return SOURCES[row.source].get("v1_as", profile) if profile == "vllm-v1" else profile


def simulate(row: PublishedRow, profile: str, seed: int = 0) -> dict[str, float]:
    """TTFT, TPOT and E2E (ms, the source's statistic) of the row's run on the simulator."""
    src = SOURCES[row.source]
    profile = engine_profile_for(row, profile)
    reqs, seen = row_requests(row, seed)
    sched = {"scheduler": "sarathi", "chunk_size": src["chunk_size"]} if src.get("scheduler") == "sarathi" \
        else {"scheduler": "vllm", "max_tokens_per_iter": src["max_tokens_per_iter"]}
    steps = {"num_scheduler_steps": src["scheduler_steps"]} if src["scheduler_steps"] > 1 else {}
    rc = ReplicaConfig(model=row.model, gpu=row.gpu, tensor_parallel=row.tp, batch_cap=src["batch_cap"],
                       quantization=src.get("quantization", "fp16"), prefix_caching=False,
                       engine_profile=profile, **sched, **steps)
    cl = Cluster(ClusterConfig(replica=rc, num_replicas=1), rng=np.random.default_rng(seed))
    cl.submit(reqs)
    cl.drain()
    res = cl.results()
    if res["rejected"].any():
        raise RuntimeError(f"{row.source} {row.model}: {int(res['rejected'].sum())} requests rejected")
    ttft = np.where(seen, res["ttft_s"], 0.0)  # the client counts TTFT 0 when it saw no text
    out = np.array([r.output_tokens for r in reqs])
    multi = seen & (out > 1)
    tpot = (res["e2e_s"][multi] - res["ttft_s"][multi]) / (out[multi] - 1)
    stat = np.median if src["stat"] == "median" else np.mean
    return {"ttft_ms": 1e3 * float(stat(ttft)), "tpot_ms": 1e3 * float(stat(tpot)),
            "e2e_ms": 1e3 * float(stat(res["e2e_s"])), "sim_duration_s": float(np.max(res["completion_s"]))}


def compare(profiles: list[str], seed: int = 0, rows: tuple[PublishedRow, ...] = ROWS) -> list[dict]:
    """One record per (row, profile): published and simulated figures with signed errors (%)."""
    out = []
    for row in rows:
        for prof in profiles:
            s = simulate(row, prof, seed)
            rec = {**asdict(row), "stat": SOURCES[row.source]["stat"], "profile": prof,
                   "engine_profile": engine_profile_for(row, prof)}
            for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
                rec[f"{k}_sim"] = s[k]
                pub = getattr(row, k)
                rec[f"{k}_err_pct"] = None if pub is None else 100.0 * (s[k] / pub - 1.0)
            out.append(rec)
    return out


API_FIT_ROWS = ("lambda-vllm054", "llama-3-8b", "h100-80gb")
"""The rows ``vllm-v0``'s one fitted constant (``api_server_per_request_s``) was chosen on: Lambda's
three Llama-3-8B H100 bursts; every other V0 row is held out."""


def _set_v0_api_server_s(value: float) -> None:
    from inferencegym.sim import execution_params as EP
    EP._V0_API_SERVER_PER_REQUEST_S = float(value)
    EP.engine_params.cache_clear()
    EP._params_for.cache_clear()


def fit_api_server(grid_ms: np.ndarray | None = None, seed: int = 0) -> dict:
    """Least squares in log TTFT over the ``API_FIT_ROWS`` bursts for ``vllm-v0``'s per-request
    API-server time (grid, ms); returns the best value and the held-out errors of the other V0 rows."""
    from inferencegym.sim import execution_params as EP
    grid_ms = np.arange(0.5, 6.01, 0.25) if grid_ms is None else grid_ms
    fit = [r for r in ROWS if (r.source, r.model, r.gpu) == API_FIT_ROWS]
    keep = EP._V0_API_SERVER_PER_REQUEST_S
    try:
        loss = []
        for c in grid_ms:
            _set_v0_api_server_s(c * 1e-3)
            loss.append(sum(np.log(simulate(r, "vllm-v1", seed)["ttft_ms"] / r.ttft_ms) ** 2 for r in fit))
        best = float(grid_ms[int(np.argmin(loss))])
        _set_v0_api_server_s(best * 1e-3)
        held = [(r, simulate(r, "vllm-v1", seed)["ttft_ms"]) for r in ROWS
                if engine_profile_for(r, "vllm-v1") == "vllm-v0" and r not in fit]
    finally:
        _set_v0_api_server_s(keep)
    return {"best_ms": best, "loss": dict(zip(map(float, grid_ms), map(float, loss))),
            "held_out": [(r.source, r.model, r.gpu, r.load_level, 100.0 * (t / r.ttft_ms - 1.0)) for r, t in held]}


def markdown(recs: list[dict]) -> str:
    lines = [("| source | model / GPU / TP | load | profile | stat | TTFT ms pub / sim (err) | "
             "TPOT ms pub / sim (err) | E2E ms pub / sim (err) |"), "|---|---|---|---|---|---|---|---|"]
    for r in recs:
        load = f"{r['rate_rps']:g} req/s" if r["load"] == "poisson" else f"burst of {r['num_prompts']}"
        cells = [f"{r[k]:,.1f} / {r[k + '_sim']:,.1f} ({r[k + '_err_pct']:+.0f}%)" if r[k] is not None
                 else f"- / {r[k + '_sim']:,.1f}" for k in ("ttft_ms", "tpot_ms", "e2e_ms")]
        lines.append(f"| {r['source']} | {r['model']} / {r['gpu']} / TP{r['tp']} | {load} | {r['profile']} | "
                     f"{r['stat']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", nargs="+", default=["vllm-v1", "vllm-2023"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the records to this file")
    ap.add_argument("--fit-api-server", action="store_true",
                    help="re-fit vllm-v0's per-request API-server time on Lambda's 8B H100 bursts and "
                         "print the held-out TTFT errors of the other V0 rows")
    a = ap.parse_args(argv)
    if a.fit_api_server:
        f = fit_api_server(seed=a.seed)
        print(f"fitted api_server_per_request_s = {f['best_ms']:.2f} ms on {API_FIT_ROWS}; held-out TTFT errors:")
        for src, model, gpu, lvl, err in f["held_out"]:
            print(f"  {src} {model} {gpu} load {lvl:g}: {err:+.1f}%")
        return 0
    t0 = time.process_time()
    recs = compare(a.profiles, a.seed)
    cmd = "OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/vllm_published.py " + " ".join(argv or sys.argv[1:])
    print(f"Command: `{cmd.strip()}` ({time.process_time() - t0:.1f} s CPU)\n")
    print(markdown(recs))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
