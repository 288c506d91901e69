"""Engine profiles against measured vLLM serving: the BLIS vLLM-V1 H100 runs, replayed on the simulator.

    python benchmarks/engine_validation.py [--profiles vllm-v1 vllm-2023] [--json]

The runs (``../shared/reference/engines/blis-stepml-vllm-h100-gt``): vLLM V1 (v0.15 fork) on H100
SXM, chunked prefill (max_num_batched_tokens 2048), max_num_seqs 128, inference-perf load in
constant-rate Poisson stages (general: 8 then 20 req/s, codegen: 5 then 10, 600 s each; roleplay:
6 req/s for 1200 s), ignore_eos. Here: the same stages as Poisson arrivals, every request at the
run's measured mean input and output length, scheduler ``sarathi`` with a 2048-token budget, batch
cap 128. Measured TPOT is ``(E2E - TTFT) / (output - 1)`` (the README's derived column).

Not reproduced: the workload is shared-prefix multi-turn chat served with prefix caching on (the
simulator of this branch has no prefix cache, so TTFT is over-predicted by the prefill of the
shared prefix); length distributions (fixed means here); Mixtral (MoE, not modelled).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
from inferencegym.sim.calibration.reference import default_reference_dir

RUNS = "engines/blis-stepml-vllm-h100-gt/gt_summary.csv"
STAGES = {"general": ((8.0, 600.0), (20.0, 600.0)), "codegen": ((5.0, 600.0), (10.0, 600.0)),
          "roleplay": ((6.0, 1200.0),)}
MODELS = {"llama-2-7b": "llama-2-7b", "llama-2-70b": "llama-2-70b", "llama-2-70b-hf": "llama-2-70b",
          "codellama-34b": "codellama-34b"}


def load_runs(ref: Path) -> list[dict]:
    with open(Path(ref) / RUNS) as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        if r["model"] not in MODELS:
            continue
        out.append({"experiment": r["experiment"], "model": MODELS[r["model"]], "tp": int(r["tp"]),
                    "workload": r["workload"], "input": float(r["input_tokens_mean"]),
                    "output": float(r["output_tokens_mean"]), "ttft_ms": float(r["ttft_mean_ms"]),
                    "tpot_ms": float(r["tpot_derived_ms=(e2e-ttft)/(out-1)"])})
    return out


def simulate(run: dict, profile: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    reqs, t0 = [], 0.0
    p, o = round(run["input"]), round(run["output"])
    for rate, dur in STAGES[run["workload"]]:
        t = t0 + np.cumsum(rng.exponential(1.0 / rate, size=int(rate * dur * 1.3) + 10))
        for x in t[t < t0 + dur]:
            reqs.append(Request(req_id=len(reqs), arrival_s=float(x), prompt_tokens=p, output_tokens=o))
        t0 += dur
    rc = ReplicaConfig(model=run["model"], gpu="h100-80gb", tensor_parallel=run["tp"], scheduler="sarathi",
                       chunk_size=2048, batch_cap=128, engine_profile=profile)
    cl = Cluster(ClusterConfig(replica=rc, num_replicas=1), rng=np.random.default_rng(seed))
    cl.submit(reqs)
    cl.drain()
    res = cl.results()
    ok = ~res["rejected"]
    ttft = res["ttft_s"][ok]
    tpot = (res["e2e_s"][ok] - ttft) / (o - 1)
    return {"ttft_ms": 1e3 * float(np.mean(ttft)), "tpot_ms": 1e3 * float(np.mean(tpot)), "requests": len(reqs)}


def validate(ref: Path, profiles, on_row=None) -> list[dict]:
    """One row per (run, profile): measured and simulated TTFT and TPOT means."""
    rows = []
    for run in load_runs(ref):
        for prof in profiles:
            s = simulate(run, prof)
            rows.append({"run": run["experiment"].split("-", 2)[-1], "profile": prof,
                         "ttft_ms_measured": run["ttft_ms"], "ttft_ms_sim": s["ttft_ms"],
                         "tpot_ms_measured": run["tpot_ms"], "tpot_ms_sim": s["tpot_ms"],
                         "tpot_err_pct": 100 * (s["tpot_ms"] / run["tpot_ms"] - 1),
                         "ttft_err_pct": 100 * (s["ttft_ms"] / run["ttft_ms"] - 1)})
            if on_row:
                on_row(rows[-1])
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| run | profile | TTFT ms measured | TTFT ms sim | TTFT err % | TPOT ms measured | TPOT ms sim | TPOT err % |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['run']} | {r['profile']} | {r['ttft_ms_measured']:.1f} | {r['ttft_ms_sim']:.1f} | "
                   f"{r['ttft_err_pct']:+.0f} | {r['tpot_ms_measured']:.2f} | {r['tpot_ms_sim']:.2f} | "
                   f"{r['tpot_err_pct']:+.0f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference-dir", type=Path, default=default_reference_dir())
    ap.add_argument("--profiles", nargs="+", default=["vllm-v1", "vllm-2023", "kernel-only"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = validate(a.reference_dir, a.profiles,
                    on_row=(lambda r: print(json.dumps(r), flush=True)) if a.json else None)
    if not a.json:
        print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
