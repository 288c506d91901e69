"""Prefix-sharing generators against the Mooncake synthetic trace: fit quality and speed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/workload_prefix.py [--seeds 5] [--reference DIR]

For each shipped spec (``mooncake_shared_prefix``, ``mooncake_multiturn``, ``mooncake_agent``), draws
``--seeds`` workloads as long as the trace (1022 s) and reports the median over seeds of the
request rate, mean prompt and output tokens, the infinite-cache hit bound on 16-token blocks, the
reuse distance p50, distinct prefixes and mean turns per session (all by `prefix_stats`, the same
function as for the trace), next to the trace's. Then the generator speed: requests generated per
second of wall time (one hour of traffic at the fitted rate; generation alone, and generation plus
`to_requests` with simulator block hashes). Prints Markdown (for docs/bench/workloads_prefix.md).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from inferencegym.workload.prefix_gen import default_prefix_spec, generate_prefix_workload
from inferencegym.workload.prefix_loaders import load_prefix_trace
from inferencegym.workload.prefix_stats import prefix_stats

NAMES = ("mooncake_shared_prefix", "mooncake_multiturn", "mooncake_agent")


def summary(w) -> dict[str, float]:
    s = prefix_stats(w, block_tokens=16)
    return {"req/s": len(w) / max(w.span_s, 1e-9), "mean prompt": s["mean_prompt_tokens"],
            "mean output": s["mean_output_tokens"], "hit bound": s["hit_bound"],
            "reuse p50 (s)": s["reuse"]["seconds"]["p50"] or float("nan"),
            "prefixes": s["popularity"]["distinct_prefixes"], "mean turns": s["turns"]["mean_turns"] or 1.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--reference", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared/reference")
    args = ap.parse_args()
    trace = load_prefix_trace(args.reference / "traces/mooncake/synthetic_trace.jsonl", "mooncake")
    ref = summary(trace)
    cols = list(ref)
    print("| workload | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    print("| Mooncake synthetic trace | " + " | ".join(f"{ref[c]:.4g}" for c in cols) + " |")
    for name in NAMES:
        spec = default_prefix_spec(name)
        rows = [summary(generate_prefix_workload(spec, trace.span_s, np.random.default_rng(seed)))
                for seed in range(args.seeds)]
        med = {c: float(np.median([r[c] for r in rows])) for c in cols}
        print(f"| {name} (median of {args.seeds} seeds) | "
              + " | ".join(f"{med[c]:.4g} ({100 * (med[c] - ref[c]) / ref[c]:+.0f}%)" for c in cols) + " |")
    print()
    print("| generator | requests in 1 h | generate (req/s) | generate + to_requests (req/s) |")
    print("|---|---:|---:|---:|")
    for name in NAMES:
        spec = default_prefix_spec(name)
        g, gr, n = [], [], 0
        for seed in range(3):
            t0 = time.perf_counter()
            w = generate_prefix_workload(spec, 3600.0, np.random.default_rng(seed))
            t1 = time.perf_counter()
            w.to_requests()
            t2 = time.perf_counter()
            n = len(w)
            g.append(n / (t1 - t0))
            gr.append(n / (t2 - t0))
        print(f"| {name} | {n} | {np.median(g):,.0f} | {np.median(gr):,.0f} |")


if __name__ == "__main__":
    main()
