"""Fit vLLM V1's sampler price on the measured H100 sweep (batch x vocabulary), and carry the refit
engine into ``calibration.json``.

The ``vllm-v1`` engine profile prices the sampler of every iteration as
``gpu_fixed_s + sampler_s_per_logit x sampled sequences x vocabulary / dp``
(``sim/calibration/engines.py``: ``VLLM_V1_GPU_FIXED_S``, ``VLLM_V1_SAMPLER_S_PER_LOGIT``). This script
fits that form (least squares on the relative error: every row weighs alike) on the sweep's rows
(``benchmarks/gpu_sampler_sweep.py`` on a lent H100, ``benchmarks/results/gpu_h100_2026-11-26/
sampler_sweep.json``: top-p, greedy and random paths, batch 1-1,024, vocabularies 32,000-201,088,
graph-replayed and eager), prints each path's fit with its error per row and per vocabulary, and a
three-term form (``+ c x vocabulary``, an intercept that grows with the vocabulary) for comparison.

    python benchmarks/sampler_fit.py                      # the fits and per-row errors (markdown)
    python benchmarks/sampler_fit.py --json out.json      # ... also as JSON
    python benchmarks/sampler_fit.py --sweep benchmarks/results/gpu_h200_2026-11-26/sampler_sweep.json
    python benchmarks/sampler_fit.py --write-engine       # refit vllm-v1 (calibration.fit) and write
                                                          # its engine entry into calibration.json

``--write-engine`` runs the whole calibration fit (``calibration.fit.fit_all``) and replaces only
``engines.vllm-v1`` of the committed ``inferencegym/data/calibration.json``: the kernel stages' least
squares reproduce the committed figures only to ~1e-8 relative on another machine's BLAS, and that
noise is not this refit's to record.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

SWEEP = Path(__file__).resolve().parent / "results" / "gpu_h100_2026-11-26" / "sampler_sweep.json"
"""The lead's H100 sweep (NVIDIA H100 80GB HBM3, torch 2.11 + CUDA 13, 2026-11-26)."""
SWEEP_H200 = SWEEP.parents[1] / "gpu_h200_2026-11-26" / "sampler_sweep.json"
"""The same sweep on a lent H200 (NVIDIA H200, same software, 2026-11-26): ``--sweep`` it."""
CALIBRATION = Path(__file__).resolve().parents[1] / "inferencegym" / "data" / "calibration.json"


def load_rows(path: Path = SWEEP, kind: str = "top_p", column: str = "graph_s") -> list[dict]:
    """The sweep's rows of one sampler path with a timing in ``column`` (rows that failed are left out)."""
    rows = json.loads(Path(path).read_text())["rows"]
    out = [r for r in rows if r["kind"] == kind and column in r]
    if not out:
        raise ValueError(f"no {kind!r} rows with {column!r} in {path}; expected gpu_sampler_sweep.py output")
    return out


def fit_relative(rows: list[dict], column: str = "graph_s", per_vocab_term: bool = False) -> dict:
    """Least squares on the relative error of ``a + b x batch x vocab`` (``per_vocab_term``:
    ``a + c x vocab + b x batch x vocab``); linear in the coefficients, so solved exactly."""
    B = np.array([r["batch"] for r in rows], float)
    V = np.array([r["vocab"] for r in rows], float)
    y = np.array([r[column] for r in rows], float)
    cols = [np.ones_like(B)] + ([V] if per_vocab_term else []) + [B * V]
    X = np.stack(cols, 1) / y[:, None]
    coef = np.linalg.lstsq(X, np.ones_like(y), rcond=None)[0]
    out = {"fixed_s": float(coef[0]), "s_per_logit": float(coef[-1])}
    if per_vocab_term:
        out["s_per_vocab_entry"] = float(coef[1])
    return out


def predict_s(fit: dict, batch: float, vocab: float) -> float:
    """The fitted price of one iteration's sampler over ``batch`` sequences and ``vocab`` entries."""
    return fit["fixed_s"] + fit.get("s_per_vocab_entry", 0.0) * vocab + fit["s_per_logit"] * batch * vocab


def errors(fit: dict, rows: list[dict], column: str = "graph_s") -> list[dict]:
    """Per row: measured and modelled seconds and the relative error (model / measured - 1)."""
    return [{"vocab": r["vocab"], "batch": r["batch"], "measured_s": r[column],
             "model_s": predict_s(fit, r["batch"], r["vocab"]),
             "error": predict_s(fit, r["batch"], r["vocab"]) / r[column] - 1.0} for r in rows]


def per_vocab_summary(errs: list[dict]) -> dict[int, dict]:
    """Max and median absolute relative error per vocabulary."""
    out = {}
    for v in sorted({e["vocab"] for e in errs}):
        a = np.abs([e["error"] for e in errs if e["vocab"] == v])
        out[v] = {"max": float(a.max()), "median": float(np.median(a))}
    return out


def all_fits(path: Path = SWEEP) -> dict:
    """Every path x timing column: the two-term fit (and the three-term one), their overall errors."""
    res = {}
    for kind in ("top_p", "greedy", "random"):
        for col in ("graph_s", "eager_s"):
            rows = load_rows(path, kind, col)
            two, three = fit_relative(rows, col), fit_relative(rows, col, per_vocab_term=True)
            e2, e3 = np.abs([e["error"] for e in errors(two, rows, col)]), \
                np.abs([e["error"] for e in errors(three, rows, col)])
            res[f"{kind}/{col}"] = {"two_term": two, "three_term": three,
                                    "max": float(e2.max()), "median": float(np.median(e2)),
                                    "max_three": float(e3.max()), "median_three": float(np.median(e3))}
    return res


def report(path: Path = SWEEP) -> str:
    """Markdown: the fits of every path, the top-p graph rows' errors under the committed and the old
    constants, per vocabulary."""
    from inferencegym.sim.calibration.engines import VLLM_V1_GPU_FIXED_S, VLLM_V1_SAMPLER_S_PER_LOGIT

    fits = all_fits(path)
    s = ["| path | timing | fixed (us) | per logit (s) | max / median err | 3-term: + per entry (s) | max / median |",
         "|---|---|---:|---:|---:|---:|---:|"]
    for key, f in fits.items():
        k, c = key.split("/")
        t2, t3 = f["two_term"], f["three_term"]
        s.append(f"| {k} | {c[:-2]} | {t2['fixed_s'] * 1e6:.1f} | {t2['s_per_logit']:.3e} | "
                 f"{f['max']:.1%} / {f['median']:.1%} | {t3['s_per_vocab_entry']:.2e} | "
                 f"{f['max_three']:.1%} / {f['median_three']:.1%} |")
    rows = load_rows(path)
    committed = {"fixed_s": VLLM_V1_GPU_FIXED_S, "s_per_logit": VLLM_V1_SAMPLER_S_PER_LOGIT}
    old = {"fixed_s": 1.77e-4, "s_per_logit": 1.11e-10}
    new_e, old_e = errors(committed, rows), errors(old, rows)
    s += ["", f"Top-p, graph-replayed: committed ({committed['fixed_s'] * 1e6:.0f} us + "
          f"{committed['s_per_logit']:.3g} s/logit) vs the two-point fit (177 us + 1.11e-10 s/logit)", "",
          "| vocab | batch | measured (ms) | model (ms) | error | two-point model (ms) | error |",
          "|---:|---:|---:|---:|---:|---:|---:|"]
    for n, o in zip(new_e, old_e):
        s.append(f"| {n['vocab']:,} | {n['batch']:,} | {n['measured_s'] * 1e3:.3f} | {n['model_s'] * 1e3:.3f} | "
                 f"{n['error']:+.1%} | {o['model_s'] * 1e3:.3f} | {o['error']:+.1%} |")
    s += ["", "| vocab | max / median error (committed) | max / median error (two-point) |", "|---:|---:|---:|"]
    sn, so = per_vocab_summary(new_e), per_vocab_summary(old_e)
    for v in sn:
        s.append(f"| {v:,} | {sn[v]['max']:.1%} / {sn[v]['median']:.1%} | {so[v]['max']:.1%} / {so[v]['median']:.1%} |")
    return "\n".join(s)


def write_engine(out: Path = CALIBRATION) -> dict:
    """Refit every stage (``calibration.fit.fit_all``) and write only its ``engines.vllm-v1`` into
    ``out`` (atomically); returns the new entry."""
    from inferencegym.sim.calibration.fit import fit_all
    from inferencegym.sim.calibration.reference import default_reference_dir

    ref = default_reference_dir()
    if not Path(ref).is_dir():
        raise SystemExit(f"reference data not found at {ref}: the refit needs ../shared/reference "
                         "(Vidur, SplitwiseSim, BLIS runs); pass it as INFERENCEGYM_REFERENCE_DIR")
    entry = fit_all(Path(ref))["engines"]["vllm-v1"]
    cal = json.loads(out.read_text())
    cal["engines"]["vllm-v1"] = json.loads(json.dumps(entry))
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(cal, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out)
    return entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, default=SWEEP)
    ap.add_argument("--json", type=Path, help="also write every path's fit as JSON here")
    ap.add_argument("--write-engine", action="store_true",
                    help="refit vllm-v1 and write its engine entry into inferencegym/data/calibration.json")
    a = ap.parse_args(argv)
    if not a.sweep.is_file():
        raise SystemExit(f"sweep not found: {a.sweep}; expected gpu_sampler_sweep.py output (--sweep PATH)")
    if a.write_engine:
        e = write_engine()
        print(f"wrote engines.vllm-v1 of {CALIBRATION}: fixed_s {e['fixed_s'] * 1e3:.4f} ms, all-reduce "
              f"{e['allreduce_latency_s'] * 1e6:.2f} us, per degree {e['allreduce_latency_tp_s']}")
        return 0
    print(report(a.sweep))
    if a.json:
        a.json.write_text(json.dumps(all_fits(a.sweep), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
