"""Engine profiles against measured vLLM serving: the BLIS vLLM-V1 H100 runs, replayed on the simulator.

    python benchmarks/engine_validation.py [--profiles vllm-v1] [--sharing none system inference-perf] [--json]
    python benchmarks/engine_validation.py --gemm-check   # H100 GEMMs: 2024 fit, today's fit, measured

The runs (``../shared/reference/engines/blis-stepml-vllm-h100-gt``): vLLM V1 (v0.15 fork: prefix
caching and asynchronous scheduling on) on H100 SXM, max_num_batched_tokens 2048, max_num_seqs 128,
max_model_len 4096; inference-perf ``shared_prefix`` load, ``constant`` stages (general: 8 then 20
req/s, codegen: 5 then 10, 600 s each; roleplay: 6 req/s for 1200 s), streaming, ignore_eos. Its
settings (``inferencegym.sim.calibration.blis.WORKLOADS``: general 9 system prompts x 5 users,
system 100 + question 447 tokens, output 248; codegen 11 x 4, 100 + 466, 247; roleplay 10 x 5,
150 + 600, 251; multi-turn chat on) are BLIS's own re-simulation inputs (inference-sim/inference-sim,
branch ``training``, ``testdata/roofline_goldendataset.json``); how inference-perf turns them into
requests is its ``datagen/shared_prefix_datagen.py`` (kubernetes-sigs/inference-perf v0.4.0). Three replays, each with scheduler ``sarathi`` (2048-token chunks), batch cap
128, prefix caching on (16-token blocks, vLLM V1 semantics):

* ``none`` (the replay before prefix caching): Poisson stages, every request at the run's measured
  mean prompt and output lengths, no block hashes;
* ``system``: inference-perf's groups and lengths, only the system prompts shared (a fresh question
  per request);
* ``inference-perf``: what inference-perf sends: its ``groups x users`` prompts in turn (request
  ``d`` sends prompt ``d mod N``), so a prompt seen ``N`` requests earlier is a cache hit but for its
  last partial block (``inferencegym.workload.inference_perf``).

Measured TPOT is per generated token, ``(E2E - TTFT) / (output_len - 1)``: the server generates
exactly ``output_len`` tokens (ignore_eos), while the README's derived column divides by the
re-tokenised output count (1-2 % fewer tokens; 18 % fewer for Llama-2-7B). Simulated TPOT is the
same quantity of the replay. Mixtral (MoE) is not modelled.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
from inferencegym.sim.calibration.blis import WORKLOADS, BlisRun, decode_anchors, load_runs
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.calibration.reference import default_reference_dir
from inferencegym.workload.inference_perf import InferencePerfSharedPrefix, generate_inference_perf

SHARING = ("none", "system", "inference-perf")


def workload_spec(run: BlisRun, reuse_prompts: bool = True) -> InferencePerfSharedPrefix:
    """The run's inference-perf load, prompt lengths scaled to the measured mean."""
    return InferencePerfSharedPrefix(**WORKLOADS[run.workload], prompt_token_scale=run.prompt_token_scale,
                                     reuse_prompts=reuse_prompts)


def replay_requests(run: BlisRun, sharing: str, seed: int = 0) -> list[Request]:
    """The requests of one replay (see the module docstring)."""
    rng = np.random.default_rng(seed)
    if sharing == "none":
        reqs, t0 = [], 0.0
        p, o = round(run.input_tokens), round(run.output_tokens_counted)
        for rate, dur in WORKLOADS[run.workload]["stages"]:
            t = t0 + np.cumsum(rng.exponential(1.0 / rate, size=int(rate * dur * 1.3) + 10))
            for x in t[t < t0 + dur]:
                reqs.append(Request(req_id=len(reqs), arrival_s=float(x), prompt_tokens=p, output_tokens=o))
            t0 += dur
        return reqs
    if sharing not in SHARING:
        raise ValueError(f"unknown sharing {sharing!r}; valid: {', '.join(SHARING)}")
    return generate_inference_perf(workload_spec(run, sharing == "inference-perf"), rng).to_requests()


def replay_cluster(run: BlisRun, profile: str, sharing: str = "inference-perf",
                   seed: int = 0) -> tuple[list[Request], Cluster]:
    """One replay of ``run`` on the replica BLIS's vLLM served (chunked prefill at 2,048 tokens, 128
    sequences, prefix caching), drained: the requests and the cluster that served them."""
    reqs = replay_requests(run, sharing, seed)
    rc = ReplicaConfig(model=run.model, gpu="h100-80gb", tensor_parallel=run.tp, scheduler="sarathi",
                       chunk_size=2048, batch_cap=128, engine_profile=profile, prefix_caching=True)
    cl = Cluster(ClusterConfig(replica=rc, num_replicas=1), rng=np.random.default_rng(seed))
    cl.submit(reqs)
    cl.drain()
    return reqs, cl


def simulate(run: BlisRun, profile: str, sharing: str = "inference-perf", seed: int = 0) -> dict:
    """Mean TTFT and TPOT (ms) of one replay, and its prefix-cache hit rate (cached / prompt tokens)."""
    reqs, cl = replay_cluster(run, profile, sharing, seed)
    res = cl.results()
    ok = ~res["rejected"]
    ttft = res["ttft_s"][ok]
    o = reqs[0].output_tokens
    tpot = (res["e2e_s"][ok] - ttft) / (o - 1)
    hit = sum(r.cached_tokens for r in reqs) / sum(r.prompt_tokens for r in reqs)
    return {"ttft_ms": 1e3 * float(np.mean(ttft)), "tpot_ms": 1e3 * float(np.mean(tpot)),
            "hit_rate": float(hit), "requests": len(reqs)}


def validate(ref: Path, profiles=("vllm-v1",), sharings=SHARING, on_row=None, runs=None) -> list[dict]:
    """One row per (run, profile): measured TTFT and TPOT means and each replay's (``sim_<sharing>``)."""
    rows = []
    for run in load_runs(ref):
        if runs is not None and run.name not in runs:
            continue
        for prof in profiles:
            row = {"run": run.name, "profile": prof, "ttft_ms_measured": run.ttft_ms,
                   "tpot_ms_measured": run.tpot_ms, "tpot_ms_readme": run.tpot_derived_ms}
            for sh in sharings:
                s = simulate(run, prof, sh)
                row[f"ttft_ms_{sh}"] = s["ttft_ms"]
                row[f"tpot_ms_{sh}"] = s["tpot_ms"]
                row[f"hit_rate_{sh}"] = s["hit_rate"]
                row[f"ttft_err_pct_{sh}"] = 100 * (s["ttft_ms"] / run.ttft_ms - 1)
                row[f"tpot_err_pct_{sh}"] = 100 * (s["tpot_ms"] / run.tpot_ms - 1)
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def markdown(rows: list[dict]) -> str:
    sh = [s for s in SHARING if f"ttft_ms_{s}" in rows[0]]
    head = (["run", "profile", "TTFT ms measured"] + [f"TTFT ms {s} (err %)" for s in sh]
            + ["TPOT ms measured (README)"] + [f"TPOT ms {s} (err %)" for s in sh])
    if "inference-perf" in sh:
        head += ["hit rate inference-perf", "TTFT gap / sim TPOT"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["run"], r["profile"], f"{r['ttft_ms_measured']:.1f}"]
        cells += [f"{r[f'ttft_ms_{s}']:.1f} ({r[f'ttft_err_pct_{s}']:+.0f})" for s in sh]
        cells.append(f"{r['tpot_ms_measured']:.2f} ({r['tpot_ms_readme']:.2f})")
        cells += [f"{r[f'tpot_ms_{s}']:.2f} ({r[f'tpot_err_pct_{s}']:+.0f})" for s in sh]
        if "inference-perf" in sh:
            gap = (r["ttft_ms_measured"] - r["ttft_ms_inference-perf"]) / r["tpot_ms_inference-perf"]
            cells += [f"{r['hit_rate_inference-perf']:.3f}", f"{gap:+.2f}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def decode_breakdown(ref: Path, profile: str = "vllm-v1") -> list[dict]:
    """One decode step of every single-stage run (its Little's-law batch at its mean context, see
    ``blis.DecodeAnchor``), measured against the model's parts, ms: GEMMs, decode attention,
    all-reduces, the rest of the kernels (elementwise, embedding, LM head) and the engine profile's
    overhead."""
    rows = []
    for a in decode_anchors(ref, min_tp=1):
        m = ExecutionModel.from_preset(model=a.model, gpu="h100-80gb", tensor_parallel=a.tp, engine_profile=profile)
        k = m._replace(engine_overhead=False)  # the profile's own kernels, no overhead
        L, B = m.model.num_layers, a.batch
        ops = m.layer_op_times_s(float(B))
        gemm = L * sum(ops[g] for g in m._GEMM_NAMES)
        attn = L * m.attention_decode_layer_s(B, B * a.context_tokens)
        ar = L * ops["all_reduce"]
        ka, kb = k.decode_coeffs(B, 0)
        kernels = ka + kb * B * a.context_tokens - L * k.layer_op_times_s(float(B))["all_reduce"]
        ma, mb = m.decode_coeffs(B, 0)
        total = ma + mb * B * a.context_tokens
        rows.append({"run": a.experiment.split("-", 2)[-1], "batch": B, "context": round(a.context_tokens),
                     "measured_ms": 1e3 * a.step_s, "predicted_ms": 1e3 * total, "gemm_ms": 1e3 * gemm,
                     "attention_ms": 1e3 * attn, "all_reduce_ms": 1e3 * ar,
                     "other_kernels_ms": 1e3 * (kernels - gemm - attn), "engine_ms": 1e3 * (total - kernels - ar),
                     "err_pct": 100 * (total / a.step_s - 1)})
    return rows


def h100_gemm_check(ref: Path, tokens=(1, 16, 32, 64, 128, 256, 512, 2048)) -> str:
    """Markdown table: one layer's four GEMMs (us) on H100 under the 2024 fit (``vllm-2023``,
    ``vllm-v0``, ``kernel-only``) and today's (``vllm-v1``), next to Vidur's 2024 H100 rows and the
    project's 2026 H100 rows (Llama-2-7B TP1: today's fit's input; Llama-3-70B TP4 shard: held out)."""
    import json as _json

    from inferencegym.sim.calibration import reference as R
    from inferencegym.sim.calibration.stages import build_model
    from inferencegym.sim.execution_params import _params_for

    g4 = R.GEMM_OPS
    ops = R.vidur_ops(ref)
    vid = ops[(ops.gpu == "h100-80gb") & ops.op.isin(g4) & (ops.tp == 1)].groupby("n").measured_s.sum()
    def measured(gpu: str, name: str) -> dict[int, float]:
        out: dict[int, float] = {}
        for r in _json.loads((R.MEASURED_PROFILES / gpu / name).read_text())["rows"]:
            if r["op"] in g4:
                out[r["n_tokens"]] = out.get(r["n_tokens"], 0.0) + r["time_s"]
        return out

    h7, h70 = measured("h100-80gb", "llama-2-7b_tp1.json"), measured("h100-80gb", "llama-3-70b_tp4.json")
    k24 = _params_for("h100-80gb", "h100", "vllm-2023")[0]  # 2024 fit
    k26 = _params_for("h100-80gb", "h100", "vllm-v1")[0]  # today's fit
    models = [build_model("llama-2-7b", "h100-80gb", 1, k24), build_model("llama-2-7b", "h100-80gb", 1, k26),
              build_model("llama-3-70b", "h100-80gb", 4, k24), build_model("llama-3-70b", "h100-80gb", 4, k26)]

    def us(m, n):
        o = m.layer_op_times_s(float(n))
        return 1e6 * sum(o[x] for x in g4)

    out = ["| tokens | 7B TP1: Vidur H100 (2024) | H100 measured (2026) | 2024 fit | today's fit "
           "| 70B TP4 shard: H100 measured (2026) | 2024 fit | today's fit |", "|---|---|---|---|---|---|---|---|"]
    for n in tokens:
        a24, a26, b24, b26 = (f"{us(m, n):.0f}" for m in models)
        cells = [f"{1e6 * vid[n]:.0f}" if n in vid.index else "-", f"{1e6 * h7[n]:.0f}" if n in h7 else "-",
                 a24, a26, f"{1e6 * h70[n]:.0f}" if n in h70 else "-", b24, b26]
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference-dir", type=Path, default=default_reference_dir())
    ap.add_argument("--profiles", nargs="+", default=["vllm-v1"])
    ap.add_argument("--sharing", nargs="+", default=list(SHARING), choices=SHARING)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--gemm-check", action="store_true",
                    help="only print the H100 GEMM table (2024 fit, today's fit, measured rows)")
    a = ap.parse_args(argv)
    if a.gemm_check:
        print(h100_gemm_check(a.reference_dir))
        return 0
    rows = validate(a.reference_dir, a.profiles, a.sharing,
                    on_row=(lambda r: print(json.dumps(r), flush=True)) if a.json else None)
    if not a.json:
        print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
