"""Error bands of served TTFT, TPOT and E2E per engine profile, from every comparison with measured vLLM serving.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/serving_bands.py [--write] [--json out.json]

Comparisons (measured vs simulated, signed error %):

- ``vllm-v1``: the five BLIS vLLM v0.15 H100 runs the replica keeps up with (means; the replay of
  ``benchmarks/engine_validation.py`` with inference-perf's prefix sharing) and DigitalOcean's three
  vLLM 0.14.1 H200 points (medians; ``benchmarks/vllm_published.py``). The two BLIS ``general`` runs
  are listed but not in the band (their 20 req/s stage is at the edge of the replica's capacity).
- ``vllm-v0``: the thirteen published V0-era points (vLLM 0.5.4 bursts, 0.6.0 with multi-step
  scheduling), replayed on ``vllm-v0``.

What was fitted on what: the ``vllm-v1`` front end (6.5 ms) is the least-squares constant over the
eight ``vllm-v1`` TTFT points, so its TTFT band is in-sample for that one constant; the all-reduce
latency saw the decode steps of the two roleplay runs at TP2/TP4; every other figure (kernels,
per-step cost) comes from kernel profiles and the CI latencies, none from these runs. ``vllm-v0``'s
one constant of its own, the API server's 3.0 ms per request, was fitted on Lambda's three 8B H100
bursts (``benchmarks/vllm_published.py --fit-api-server``): those three TTFT points are in-sample,
the other ten held out.

``--write`` stores the bands in ``inferencegym/data/calibration_error.json`` (``serving``), where
``ExecutionModel.calibration_error()["serving"]`` (and so ``inferencegym simulate --json`` and the
single-agent env's reset info) report them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import engine_validation as EV  # noqa: E402
import vllm_published as VP  # noqa: E402
from inferencegym.sim.calibration.blis import WORKLOADS, load_runs  # noqa: E402
from inferencegym.sim.calibration.reference import default_reference_dir  # noqa: E402

ERROR_JSON = Path(__file__).resolve().parents[1] / "inferencegym" / "data" / "calibration_error.json"
METRICS = ("ttft", "tpot", "e2e")


def comparisons(ref: Path) -> list[dict]:
    """One row per (comparison point, metric): source, point, profile, measured, simulated, error %."""
    rows = []
    for run in load_runs(ref):
        s = EV.simulate(run, "vllm-v1", "inference-perf")
        o = WORKLOADS[run.workload]["output_tokens"]
        sim = {"ttft": s["ttft_ms"], "tpot": s["tpot_ms"], "e2e": s["ttft_ms"] + s["tpot_ms"] * (o - 1)}
        meas = {"ttft": run.ttft_ms, "tpot": run.tpot_ms, "e2e": run.e2e_ms}
        for k in METRICS:
            rows.append({"source": "blis-vllm015-h100", "point": run.name, "profile": "vllm-v1",
                         "stat": "mean", "metric": k, "measured_ms": meas[k], "simulated_ms": sim[k],
                         "in_band": run.workload != "general"})
    for r in VP.compare(["vllm-v1"]):
        for k in METRICS:
            if r[f"{k}_ms"] is None:
                continue
            load = f"{r['rate_rps']:g} req/s" if r["load"] == "poisson" else f"burst {r['num_prompts']}"
            rows.append({"source": r["source"], "point": f"{r['model']} {r['gpu']} TP{r['tp']} {load}",
                         "profile": r["engine_profile"], "stat": r["stat"], "metric": k,
                         "measured_ms": r[f"{k}_ms"], "simulated_ms": r[f"{k}_ms_sim"], "in_band": True})
    for x in rows:
        x["err_pct"] = 100.0 * (x["simulated_ms"] / x["measured_ms"] - 1.0)
    return rows


def bands(rows: list[dict]) -> dict:
    """Per profile and metric: MAPE, max APE and the signed mean error over the in-band rows."""
    out: dict = {}
    for prof in sorted({r["profile"] for r in rows}):
        d = {}
        for k in METRICS:
            e = np.array([r["err_pct"] for r in rows if r["profile"] == prof and r["metric"] == k and r["in_band"]])
            if e.size:
                d[k] = {"mape_pct": round(float(np.mean(np.abs(e))), 1),
                        "max_ape_pct": round(float(np.max(np.abs(e))), 1),
                        "mean_err_pct": round(float(np.mean(e)), 1), "n": int(e.size)}
        srcs = sorted({r["source"] for r in rows if r["profile"] == prof and r["in_band"]})
        d["source"] = "measured vLLM serving: " + ", ".join(srcs) + " (benchmarks/serving_bands.py)"
        out[prof] = d
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| source | point | profile | stat | metric | measured ms | simulated ms | error | in band |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['source']} | {r['point']} | {r['profile']} | {r['stat']} | {r['metric'].upper()} | "
                     f"{r['measured_ms']:,.1f} | {r['simulated_ms']:,.1f} | {r['err_pct']:+.0f} % | "
                     f"{'yes' if r['in_band'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference-dir", type=Path, default=default_reference_dir())
    ap.add_argument("--write", action="store_true", help=f"store the bands in {ERROR_JSON.name}")
    ap.add_argument("--json", default=None, help="also write the rows and bands to this file")
    a = ap.parse_args(argv)
    rows = comparisons(a.reference_dir)
    b = bands(rows)
    print(markdown(rows) + "\n")
    print(json.dumps(b, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "bands": b}, indent=1))
    if a.write:
        table = json.loads(ERROR_JSON.read_text())
        table["serving"] = b
        tmp = ERROR_JSON.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        tmp.replace(ERROR_JSON)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
