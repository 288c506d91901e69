"""Fit the FP8 GEMM compute efficiency on the measured H200 BF16-vs-FP8 GEMM times.

``python -m inferencegym.sim.calibration.fp8_fit`` reads
``<reference>/h200/h200_llama2_7b_quant_gemm.json`` (Llama-2-7B's four per-layer GEMMs at 1-4096
tokens, BF16 and FP8 e4m3 on one H200) and finds the one number the FP8 tier needs: the fraction of
the calibrated FP16 GEMM compute efficiency the FP8 GEMMs reach against the FP8 peak
(``presets.FP8_COMPUTE_EFFICIENCY``). The fit matches the *speed-up ratios* (BF16 time / FP8 time),
so the BF16 model's own error does not leak into the figure; memory-bound rows are fixed by the
1-byte weights. It prints the fitted figure and the ratio errors; the figure is committed in
``presets.py`` (the raw file is not).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from scipy.optimize import minimize_scalar

from inferencegym.sim.calibration.reference import _need, default_reference_dir

QUANT_GEMM_FILE = Path("h200") / "h200_llama2_7b_quant_gemm.json"


def load_rows(reference_dir: Path | None = None) -> list[dict]:
    """The measured rows (``op``, ``n_tokens``, ``bf16_s``, ``fp8_s``)."""
    ref = Path(reference_dir) if reference_dir is not None else default_reference_dir()
    return json.loads(_need(ref / QUANT_GEMM_FILE).read_text("utf-8"))["rows"]


def predicted_ratios(efficiency: float, rows: list[dict]) -> list[float]:
    """Modelled BF16/FP8 GEMM time ratio of each row at relative FP8 compute ``efficiency``."""
    from dataclasses import replace

    from inferencegym.sim.execution import ExecutionModel
    from inferencegym.sim.presets import get_quantization

    base = ExecutionModel.from_preset(model="llama-2-7b", gpu="h200-141gb", engine_profile="kernel-only")
    fp8 = base._replace(quantization=replace(get_quantization("fp8"), compute_efficiency=efficiency))
    out = []
    for r in rows:
        n = int(r["n_tokens"])
        out.append(base.layer_op_times_s(n)[r["op"]] / fp8.layer_op_times_s(n)[r["op"]])
    return out


def fit(reference_dir: Path | None = None) -> dict:
    """``{"compute_efficiency", "ratio_mape_pct", "measured_ratio_range", "rows"}``."""
    rows = load_rows(reference_dir)
    meas = [r["bf16_s"] / r["fp8_s"] for r in rows]

    def loss(e: float) -> float:
        pred = predicted_ratios(e, rows)
        return sum(math.log(p / m) ** 2 for p, m in zip(pred, meas))

    res = minimize_scalar(loss, bounds=(0.3, 1.2), method="bounded", options={"xatol": 1e-4})
    eff = round(float(res.x), 3)
    pred = predicted_ratios(eff, rows)
    mape = 100.0 * sum(abs(p / m - 1.0) for p, m in zip(pred, meas)) / len(meas)
    return {"compute_efficiency": eff, "ratio_mape_pct": round(mape, 1),
            "measured_ratio_range": (round(min(meas), 2), round(max(meas), 2)),
            "predicted_ratio_range": (round(min(pred), 2), round(max(pred), 2)), "rows": len(rows)}


if __name__ == "__main__":
    print(json.dumps(fit(), indent=1))
