"""Calibration error bands: how far to trust a prediction of the execution-time model.

``inferencegym/data/calibration_error.json`` (written by ``benchmarks/calibration_report.py`` from
the measured errors of the committed calibration) holds, per GPU and op family, the MAPE on the
rows the fit saw and on held-out rows, and the measured ranges. :func:`calibration_error_for`
turns it into the answer for one model: per op family a status

* ``fitted``: this GPU's own measurements of this model shape were fitted;
* ``transferred``: fitted on this GPU with other shapes (the model structure carries it to this
  model / TP degree), or on another GPU of the family (H100 attention from H200), or spec-sheet
  GPUs (mean efficiencies of the calibrated GPUs);

with a band (the larger of fitted and held-out MAPE that applies), and the ranges beyond which the
model extrapolates. No I/O beyond reading the packaged JSON once per process.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

_REGISTERED: dict[str, dict] = {}


def register_gpu_errors(gpu: str, ops: dict) -> None:
    """Error bands of a GPU fitted at run time (``calibration.custom``), per op family."""
    _REGISTERED[gpu] = dict(ops)


@lru_cache(maxsize=1)
def load_error_table() -> dict:
    """The committed error table, parsed once per process."""
    try:
        text = resources.files("inferencegym").joinpath("data", "calibration_error.json").read_text("utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            "inferencegym/data/calibration_error.json is missing: regenerate it with "
            "`python benchmarks/calibration_report.py`") from None
    return json.loads(text)


def _entry(status: str, mape: float | None, source: str) -> dict:
    return {"status": status, "band_pct": None if mape is None else round(float(mape), 1), "source": source}


def calibration_error_for(*, gpu: str, model: str, tensor_parallel: int, engine_profile: str,
                          gpu_calibrated: bool, table: dict | None = None) -> dict:
    """Per op family ``{status, band_pct, source}``, the engine profile's end-to-end band, its
    served-latency bands (``serving``: TTFT / TPOT / E2E against measured vLLM serving, None where
    the profile has no such comparison), the measured ranges and the list of extrapolations for
    ``model`` at ``tensor_parallel`` on ``gpu``."""
    t = load_error_table() if table is None else table
    ops = (_REGISTERED.get(gpu) or t["ops"].get(gpu)) if gpu_calibrated else None
    fams = {}
    notes = []
    if ops is None:
        sg = t["spec_sheet"]
        for fam in ("gemm", "elementwise", "attn_prefill", "attn_decode"):
            fams[fam] = _entry("transferred", sg.get(fam), "spec-sheet GPU: mean efficiencies of the "
                               "calibrated GPUs; band = A100 fit predicting H100 kernels and H200 attention")
        notes.append(f"{gpu} has no measurements: every kernel is transferred from other GPUs")
    else:
        for fam, e in ops.items():
            seen = model in e.get("models", []) and tensor_parallel in e.get("tps", [tensor_parallel])
            band = max(v for v in (e.get("mape_pct"), e.get("heldout_mape_pct")) if v is not None)
            if seen and e.get("status", "fitted") == "fitted":
                fams[fam] = _entry("fitted", e["mape_pct"], e["source"])
            else:
                why = e["source"] if e.get("status") == "transferred" else (
                    f"{e['source']}; {model} TP{tensor_parallel} not measured: shapes from the model structure")
                fams[fam] = _entry("transferred", band, why)
    if tensor_parallel > 1:
        fams["all_reduce"] = _entry("fitted", t["all_reduce"].get(t["network_of"].get(gpu, ""), None),
                                    "NCCL all-reduce profiles (Vidur DGX), per TP degree")
    eng = t["engines"].get(engine_profile)
    engine = _entry("none", 0.0, "kernel time only") if engine_profile == "kernel-only" else \
        _entry(eng["status"], eng["mape_pct"], eng["source"])
    rng = t["ranges"].get(gpu if ops is not None else "a100-80gb", {})
    notes.append(f"prefill beyond {rng.get('prefill_tokens_max')} tokens per chunk, decode contexts "
                 f"beyond {rng.get('decode_context_max')} tokens and decode batches beyond "
                 f"{rng.get('decode_batch_max')} are extrapolated (roofline structure, no measurement)")
    return {"gpu": gpu, "model": model, "tensor_parallel": tensor_parallel,
            "engine_profile": engine_profile, "kernels": fams, "engine": engine,
            "serving": t.get("serving", {}).get(engine_profile), "ranges": rng,
            "extrapolated": notes, "calibration_version": t.get("version", "")}
