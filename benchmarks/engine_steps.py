"""How long a real vLLM-V1 engine step is, read off the BLIS H100 runs, next to the simulator's.

    python benchmarks/engine_steps.py [--profile vllm-v1]                 # step counts, every run
    python benchmarks/engine_steps.py --training-dir PATH                 # + held-out 7B stages, E2E shape
    python benchmarks/engine_steps.py --fit-frontend                      # the V1 API-server constant

1. **Step counts** (every run). The fork of vLLM v0.15 that served the BLIS runs traced each engine
   step with probability 0.1 (``--step-tracing-sample-rate``; "Step sampling = 10% probabilistic",
   inference-sim/inference-sim ``hypotheses/h-stepml``), and ``total_steps`` of
   ``cycle_time_vs_step_duration.csv`` (in ``../shared/reference/engines/``) counts the traced steps
   of each run, so ten times it is the run's number of engine iterations (+- 1/sqrt(n)). Run length /
   iterations is the mean step, a measurement of the engine step that needs no client clock and no
   token counting. Compared with the simulated replay's iteration count.
2. **Held-out TP1 stages** (``--training-dir``: a checkout of inference-sim/training, which carries
   the per-stage inference-perf reports of the same campaign; not redistributed here): Llama-2-7B
   TP1 ``codegen`` (5 then 10 req/s) and ``general`` (8 then 20 req/s), mean TTFT and TPOT per
   stage, none of them used by any fit.
3. **E2E shape** (same directory): percentiles of the roleplay runs' request latency against the
   replay's; a per-step cost that does not grow with the batch shifts them all alike, one that grows
   with batch x context (attention) widens them.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

from engine_validation import replay_cluster
from inferencegym.sim.calibration.blis import WORKLOADS, BlisRun, load_runs
from inferencegym.sim.calibration.reference import default_reference_dir

STEPS_CSV = "engines/blis-stepml-vllm-h100-gt/cycle_time_vs_step_duration.csv"
STEP_SAMPLE_RATE = 0.1
"""The fork's step-trace sampling probability in these runs."""
HELDOUT = {"codegen": ("20260217-155451-llama-2-7b-tp1-codegen", 591.63),
           "general": ("20260217-231439-llama-2-7b-tp1-general", 575.45)}
"""Llama-2-7B TP1 runs of the same campaign outside ``gt_summary.csv``: experiment, mean prompt tokens."""
PCTS = (1, 5, 10, 25, 50, 75, 90, 95, 99)
_PKEY = {1: "p1", 5: "p5", 10: "p10", 25: "p25", 50: "median", 75: "p75", 90: "p90", 95: "p95", 99: "p99"}


def replay(run: BlisRun, profile: str, seed: int = 0) -> dict:
    """The inference-perf replay of ``run``: per-request arrival, TTFT, E2E (s) and the iterations."""
    reqs, cl = replay_cluster(run, profile, "inference-perf", seed)
    res = cl.results()
    return {"arrival_s": np.array([r.arrival_s for r in reqs]), "ttft_s": res["ttft_s"], "e2e_s": res["e2e_s"],
            "output_tokens": reqs[0].output_tokens, "iterations": cl.replicas[0].iterations,
            "span_s": float(np.max(np.array([r.arrival_s for r in reqs]) + res["e2e_s"]))}


def step_counts(ref: Path, profile: str) -> list[dict]:
    """Measured (10 x traced) and simulated engine iterations and mean step per run."""
    with open(Path(ref) / STEPS_CSV) as f:
        traced = {r["experiment_id"]: int(r["total_steps"]) for r in csv.DictReader(f)}
    rows = []
    for run in load_runs(ref):
        n = traced[run.experiment]
        dur = sum(d for _, d in WORKLOADS[run.workload]["stages"])
        s = replay(run, profile)
        meas = dur / (n / STEP_SAMPLE_RATE)
        sim = s["span_s"] / s["iterations"]
        rows.append({"run": run.name, "iterations_measured": round(n / STEP_SAMPLE_RATE),
                     "sampling_error_pct": 100 / np.sqrt(n), "iterations_simulated": s["iterations"],
                     "mean_step_ms_measured": 1e3 * meas, "mean_step_ms_simulated": 1e3 * sim,
                     "step_err_pct": 100 * (sim / meas - 1)})
    return rows


def heldout_stages(training: Path, profile: str) -> list[dict]:
    """Mean TTFT and TPOT per stage of the held-out 7B TP1 runs, measured and simulated."""
    rows = []
    for wl, (exp, prompt) in HELDOUT.items():
        run = BlisRun(experiment=exp, model="llama-2-7b", tp=1, workload=wl, input_tokens=prompt,
                      output_tokens_counted=0.0, ttft_ms=0.0, e2e_ms=0.0, tpot_derived_ms=0.0)
        s = replay(run, profile)
        o, t0 = s["output_tokens"], 0.0
        for i, (rate, dur) in enumerate(WORKLOADS[wl]["stages"]):
            path = Path(training) / "default_args" / exp / "results" / f"stage_{i}_lifecycle_metrics.json"
            lat = json.loads(path.read_text())["successes"]["latency"]
            ttft, e2e = lat["time_to_first_token"]["mean"], lat["request_latency"]["mean"]
            sel = (s["arrival_s"] >= t0) & (s["arrival_s"] < t0 + dur)
            t0 += dur
            st, se = float(s["ttft_s"][sel].mean()), float(s["e2e_s"][sel].mean())
            tpot_m, tpot_s = (e2e - ttft) / (o - 1), (se - st) / (o - 1)
            rows.append({"run": f"llama-2-7b-tp1-{wl}", "stage": i, "rate": rate,
                         "ttft_ms_measured": 1e3 * ttft, "ttft_ms_simulated": 1e3 * st,
                         "ttft_err_pct": 100 * (st / ttft - 1), "tpot_ms_measured": 1e3 * tpot_m,
                         "tpot_ms_simulated": 1e3 * tpot_s, "tpot_err_pct": 100 * (tpot_s / tpot_m - 1)})
    return rows


def e2e_shape(ref: Path, training: Path, profile: str) -> list[dict]:
    """Request-latency percentiles of the roleplay runs: measured, simulated, difference (s)."""
    rows = []
    for run in load_runs(ref):
        if run.workload != "roleplay":
            continue
        path = Path(training) / "default_args" / run.experiment / "results" / "summary_lifecycle_metrics.json"
        lat = json.loads(path.read_text())["successes"]["latency"]["request_latency"]
        s = replay(run, profile)
        for p in PCTS:
            m, x = lat[_PKEY[p]], float(np.percentile(s["e2e_s"], p))
            rows.append({"run": run.name, "pct": p, "e2e_s_measured": m, "e2e_s_simulated": x, "diff_s": x - m})
    return rows


def fit_frontend(ref: Path, grid_ms=np.arange(0.0, 15.01, 0.5)) -> dict:
    """``VLLM_V1_FRONTEND_S`` as it is fitted: the least-squares constant (relative errors, 0.5 ms
    grid) over the eight vLLM-V1 serving TTFT points, every other figure fixed: the five unsaturated
    BLIS runs (means) and DigitalOcean's three vLLM 0.14.1 H200 points (medians). TTFT is the engine's
    time plus the front end, so each point's engine part is its simulated TTFT less today's constant."""
    from engine_validation import simulate as blis_simulate
    from vllm_published import ROWS, simulate as pub_simulate

    from inferencegym.sim.execution_params import engine_params
    f0 = engine_params("vllm-v1").frontend_s
    pts = [(run.name, run.ttft_ms, blis_simulate(run, "vllm-v1")["ttft_ms"]) for run in load_runs(ref)
           if run.workload != "general"]
    pts += [(f"{r.source} {r.rate_rps:g} req/s", r.ttft_ms, pub_simulate(r, "vllm-v1")["ttft_ms"])
            for r in ROWS if r.source == "do-vllm0141"]
    meas = np.array([m for _, m, _ in pts])
    engine = np.array([x for _, _, x in pts]) - 1e3 * f0
    sse = [float(np.sum(((engine + g) / meas - 1.0) ** 2)) for g in grid_ms]
    best = float(grid_ms[int(np.argmin(sse))])
    return {"frontend_ms": best, "points": [{"point": n, "ttft_ms_measured": m, "ttft_ms_simulated": e + best,
                                             "err_pct": 100 * ((e + best) / m - 1)}
                                            for (n, m, _), e in zip(pts, engine)]}


def _table(rows: list[dict]) -> str:
    keys = list(rows[0])
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)
    return "\n".join(["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
                     + ["| " + " | ".join(fmt(r[k]) for k in keys) + " |" for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference-dir", type=Path, default=default_reference_dir())
    ap.add_argument("--profile", default="vllm-v1")
    ap.add_argument("--training-dir", type=Path, default=None,
                    help="a checkout of inference-sim/training (held-out 7B stages, E2E percentiles)")
    ap.add_argument("--fit-frontend", action="store_true",
                    help="only the least-squares API-server constant (VLLM_V1_FRONTEND_S) and its points")
    a = ap.parse_args(argv)
    if a.fit_frontend:
        fit = fit_frontend(a.reference_dir)
        print(f"frontend_s = {fit['frontend_ms']:.1f} ms")
        print(_table(fit["points"]))
        return 0
    if a.training_dir is not None and not (a.training_dir / "default_args").is_dir():
        ap.error(f"--training-dir {a.training_dir} has no default_args/ (expected a checkout of "
                 "inference-sim/training)")
    print(_table(step_counts(a.reference_dir, a.profile)))
    if a.training_dir is not None:
        print()
        print(_table(heldout_stages(a.training_dir, a.profile)))
        print()
        print(_table(e2e_shape(a.reference_dir, a.training_dir, a.profile)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
