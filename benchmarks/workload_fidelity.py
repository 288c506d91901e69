"""How often does one generated hour match its trace? Pass rate per metric over many seeds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/workload_fidelity.py [--seeds 20] [--reference DIR]

Scenarios: fit each Azure 2023 trace and compare with it; fit the first half of a trace and
compare with the second half (never seen by the fit); ServeGen client windows (request-level
arrivals drawn as ServeGen does) with arXiv-summarisation lengths, which no part of the fitting
code was developed on. Prints a Markdown table (for docs/bench/workload.md).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from inferencegym.workload import Workload, load_trace
from inferencegym.workload.fidelity import TOLERANCES, fidelity
from inferencegym.workload.fit import fit_workload, generate
from inferencegym.workload.servegen import servegen_arrivals
from inferencegym.workload.stats import trace_stats


def arxiv_lengths(ref: Path, n: int, rng: np.random.Generator):
    import pyarrow.csv as pcsv
    t = pcsv.read_csv(ref / "vidur/data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv")
    p = t["num_prefill_tokens"].to_numpy()
    o = t["num_decode_tokens"].to_numpy()
    i = rng.integers(0, p.size, n)
    return p[i], o[i]


def servegen_trace(ref: Path, name: str, seed: int = 0, hours: float = 1.0) -> Workload:
    rng = np.random.default_rng(seed)
    a = servegen_arrivals(ref / f"traces/servegen/{name}__windows.parquet", start_s=72000,
                          duration_s=3600 * hours, rng=rng, max_clients=8)
    p, o = arxiv_lengths(ref, a.size, rng)
    return Workload.from_arrays(a, p, o, source=f"servegen {name} + arxiv lengths")


def scenarios(ref: Path):
    az = ref / "traces/azure_llm_2023"
    code = load_trace(az / "AzureLLMInferenceTrace_code.csv", format="azure")
    conv = load_trace(az / "AzureLLMInferenceTrace_conv.csv", format="azure")
    half = lambda w: (w.window(0, w.span_s / 2), w.window(w.span_s / 2, w.span_s))  # noqa: E731
    yield "azure_code (fit = target)", code, code
    yield "azure_conv (fit = target)", conv, conv
    c1, c2 = half(conv)
    yield "azure_conv 1st half -> 2nd half", c1, c2
    k1, k2 = half(code)
    yield "azure_code 1st half -> 2nd half", k1, k2
    for name in ("language__m-large", "multimodal__mm-image", "reason__deepseek-r1"):
        w = servegen_trace(ref, name)
        yield f"servegen {name} + arxiv", w, w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--reference", type=Path, default=Path(os.environ.get(
        "INFERENCEGYM_REFERENCE_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "reference")))
    args = ap.parse_args()
    keys = list(TOLERANCES)
    short = {"rate_mean_per_s": "rate", "iat_cv": "CV", "peak_to_mean_10s": "P/M"}
    cols = [short.get(k, k.replace("prompt_tokens_", "in ").replace("output_tokens_", "out ")) for k in keys]
    print(f"pass rate over {args.seeds} seeds of one generated hour (median rel. error in brackets)\n")
    print("| scenario | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, train, target in scenarios(args.reference):
        fit = fit_workload(train)
        ref_stats = trace_stats(target)
        res = [fidelity(trace_stats(generate(fit, 3600.0, np.random.default_rng(s))), ref_stats)
               for s in range(args.seeds)]
        cells = []
        for k in keys:
            ok = np.mean([r[k]["ok"] for r in res])
            med = np.median([r[k]["rel_err"] for r in res])
            cells.append(f"{ok:.0%} ({med:+.0%})")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def jitter_table(ref: Path, seeds: int = 5) -> None:
    """How much Gaussian jitter the 10-s burst statistics survive (median over seeds)."""
    from inferencegym.workload.adversarial import jitter

    az = ref / "traces/azure_llm_2023"
    print("\njitter sigma vs 10-s burst statistics (relative change, median over "
          f"{seeds} seeds)\n")
    print("| trace | sigma (s) | peak-to-mean | spike share (>2x) | IAT CV |")
    print("|---|---|---|---|---|")
    for kind in ("code", "conv"):
        w = load_trace(az / f"AzureLLMInferenceTrace_{kind}.csv", format="azure")
        s0 = trace_stats(w)
        for sigma in (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0):
            rs = [trace_stats(jitter(w, sigma, np.random.default_rng(k))) for k in range(seeds)]
            pm = np.median([r["peak_to_mean_10s"] / s0["peak_to_mean_10s"] - 1 for r in rs])
            sf = np.median([r["spike_frac_10s_2x"] - s0["spike_frac_10s_2x"] for r in rs])
            cv = np.median([r["iat_cv"] / s0["iat_cv"] - 1 for r in rs])
            print(f"| azure_{kind} | {sigma:g} | {pm:+.1%} | {sf:+.3f} (abs.) | {cv:+.1%} |")


if __name__ == "__main__":
    main()
    jitter_table(Path(os.environ.get("INFERENCEGYM_REFERENCE_DIR",
                                     Path(__file__).resolve().parents[1].parent / "shared" / "reference")))
