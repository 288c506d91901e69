"""Fit the execution-time model on the reference profiles and write ``calibration.json``.

    python -m inferencegym.sim.calibration.fit [--reference-dir DIR] [--out PATH]

Stages (scipy.optimize.least_squares on log(predicted/measured), soft-L1 loss):

1. all-reduce per GPU family and TP degree: ``latency + bytes / bandwidth`` (Vidur DGX profiles);
2. GEMM efficiencies per GPU (compute, memory, roofline exponent, kernel floor) on the four GEMMs
   of every profiled model/TP (Vidur ``mlp.csv``), except the held-out combinations;
3. elementwise efficiencies per GPU (norm, RoPE, activation, add, floor);
4. attention per GPU family: A100 on the Vidur Llama-2-7B samples, Hopper (H100, H200) on the
   measured H200 rows: decode floor, per sequence-and-KV-head term and KV bandwidth; prefill
   compute efficiency (causal triangle, cached-context rectangle), bandwidth, floor, per token;
5. H200: GEMMs and attention on its measured rows, elementwise on its whole-model rows
   (``gpu_fit``); today's H100 GEMMs are fitted on the project's measured H100 rows
   (``TODAY_GEMM_ROWS``), Vidur's 2024 H100 GEMM fit stays with the 2023-24 engine profiles
   (``ERA_2024_ENGINES``);
6. engine profiles: ``vllm-2023`` (fixed, per layer, per layer and extra GPU, per sequence, per
   token, kernel slowdown) on SplitwiseSim's end-to-end times except the held-out rows, and
   ``vllm-v1`` on vLLM's performance-CI latencies and the BLIS vLLM-V1 H100 decode steps at TP > 1
   (``engines``, ``blis``), kernels fixed.

Uncalibrated GPUs (spec-sheet presets) use the mean of the A100 and H100 efficiencies.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from inferencegym.sim.calibration import reference as R
from inferencegym.sim.calibration.blis import decode_anchors
from inferencegym.sim.calibration.engines import fit_vllm_v1
from inferencegym.sim.calibration.gpu_fit import _gemm_frame, fit_attention_rows, fit_gpu_profile
from inferencegym.sim.calibration.stages import (  # noqa: F401  (re-exported for evaluate, tests, the CLI)
    HELDOUT_SPLITWISE,
    HELDOUT_VIDUR,
    _kernel_with,
    build_model,
    fit_attention,
    fit_elementwise,
    fit_engine,
    fit_gemm,
    fit_network,
    is_heldout_splitwise,
    is_heldout_vidur,
)
from inferencegym.sim.execution_params import KernelParams

CALIBRATED_GPUS = ("a100-80gb", "h100-80gb", "h200-141gb")
SPEC_DEFAULT_FROM = ("a100-80gb", "h100-80gb")  # uncalibrated GPUs: mean of these efficiencies
NETWORK_FAMILY = {"a100-80gb": "a100", "h100-80gb": "h100", "h200-141gb": "h100"}
ATTENTION_FAMILY = {"a100-80gb": "a100-80gb", "h100-80gb": "h200-141gb", "h200-141gb": "h200-141gb"}
"""Whose attention fit each GPU uses: Hopper (H100, H200) shares the H200 fit."""
GEMM_FIELDS = ("gemm_eff_compute", "gemm_eff_mem", "gemm_p", "gemm_floor_s")
TODAY_GEMM_ROWS = {"h100-80gb": ("llama-2-7b", 1)}
"""Today's GEMM kernels: the H100's GEMM stage is fitted on the project's own measured H100 rows
(``inferencegym/data/gpu_profiles/h100-80gb/``, PyTorch 2.11 + CUDA 13 cuBLAS, 2026-11-26) of this
(model, TP) pair; the other measured shapes (Llama-3-8B, CodeLlama-34B TP2, Llama-2/3-70B TP4) are
held out. Vidur's H100 profile (2024 software) grows 15-35 % from 1 to 128 tokens where today's
cuBLAS grows 1-8 %; its fit is kept for the engines of its time (``ERA_2024_ENGINES``) and still
checks its rows (docs/bench/fidelity.md, "H100 GEMMs")."""
ERA_2024_ENGINES = ("vllm-2023", "vllm-v0", "kernel-only")
"""Profiles that keep, on the GPUs of ``TODAY_GEMM_ROWS``, the GEMM fit of Vidur's 2024 profile
(``calibration.json``'s ``engine_gemm``): the 2023-24 engines, and ``kernel-only``, the kernel
profiles of record, over which the MoE and FP8 constants (``sim/moe.py``, ``presets``) were fitted
and checked (refitting those over today's H100 GEMMs moves three of their checks out of their bands:
docs/bench/fidelity.md, "H100 GEMMs"). Only ``vllm-v1`` serves with today's H100 GEMMs."""


def fit_attention_rows_hopper(ref: Path, base: KernelParams) -> KernelParams:
    """Hopper attention (fitted on the H200 rows; efficiencies are fractions of each GPU's peaks,
    so H100 and H200 share them) applied on top of ``base``."""
    return fit_attention_rows(R.h200_profile(ref), "h200-141gb", base)


# ----------------------------------------------------------------------------- driver
def fit_all(ref: Path, progress=None) -> dict:
    """Run every stage; returns the calibration dict written to ``calibration.json``."""
    def step(msg):
        if progress:
            progress(msg)

    step("all-reduce")
    network = fit_network(R.vidur_allreduce(ref))
    network["pcie"] = {"latency_s": {"2": 3.0e-5, "4": 4.0e-5, "8": 5.0e-5},
                       "gbytes_per_s": {"2": 12.0, "4": 8.0, "8": 6.0}}
    ops = R.vidur_ops(ref)
    kernels: dict[str, KernelParams] = {}
    profile_elem: dict[str, dict] = {}
    for gpu in CALIBRATED_GPUS:
        fam = network[NETWORK_FAMILY[gpu]]
        k = KernelParams.from_dict({"allreduce_latency_s": fam["latency_s"],
                                    "allreduce_gbytes_per_s": fam["gbytes_per_s"]})
        if gpu == "h200-141gb":  # measured per-op and whole-model rows (no Vidur profile)
            step(f"GEMMs, attention, elementwise {gpu}")
            base = _kernel_with(kernels["h100-80gb"], allreduce_latency_s=fam["latency_s"],
                                allreduce_gbytes_per_s=fam["gbytes_per_s"])
            kernels[gpu], profile_elem[gpu] = fit_gpu_profile(R.h200_profile(ref), gpu, base)
            continue
        step(f"GEMMs {gpu}")
        k = fit_gemm(ops, gpu, k)
        step(f"elementwise {gpu}")
        k = fit_elementwise(ops, gpu, k)
        if gpu == "a100-80gb":
            step("attention a100-80gb")
            k = fit_attention(R.vidur_attention_decode(ref), R.vidur_attention_prefill(ref), k)
        elif gpu == "h100-80gb":  # provisional: refined below with the H200 (Hopper) attention fit
            step("attention h200-141gb (Hopper)")
            k = fit_attention_rows_hopper(ref, k)
        kernels[gpu] = k
    scalar = [f for f in KernelParams.__dataclass_fields__ if not f.startswith("allreduce")]
    default = {f: float(np.mean([getattr(kernels[g], f) for g in SPEC_DEFAULT_FROM])) for f in scalar}
    kernels["default"] = KernelParams.from_dict(default)  # spec-sheet GPUs: the two Vidur fits
    era_2024 = {g: {f: float(getattr(kernels[g], f)) for f in GEMM_FIELDS} for g in TODAY_GEMM_ROWS}
    step("engine overhead vllm-2023")  # 2023 engines: Ampere-era attention kernels on every GPU
    attn_2023 = {f: getattr(kernels["a100-80gb"], f) for f in KernelParams.__dataclass_fields__
                 if f.startswith("attn_")}
    engine = fit_engine(R.splitwise_times(ref), {g: _kernel_with(k, **attn_2023) for g, k in kernels.items()})
    for g, (model, tp) in TODAY_GEMM_ROWS.items():  # today's GEMMs (after the 2023 engine fit)
        step(f"GEMMs {g} (measured rows of today's kernels)")
        rows = R.measured_profiles(g)
        rows = rows[(rows["model"] == model) & (rows["tp"] == tp)]
        kernels[g] = fit_gemm(_gemm_frame(rows, g), g, kernels[g])
    step("engine overhead vllm-v1")
    v1 = fit_vllm_v1(lambda mo, g, tp, eng: build_model(mo, g, tp, kernels[g], eng), decode_anchors(ref))
    # vllm-v0 (2024) runs the 2024 GEMMs: its V1 engine figures are fitted over those kernels
    k2024 = {g: _kernel_with(k, **era_2024.get(g, {})) for g, k in kernels.items()}
    v0 = fit_vllm_v1(lambda mo, g, tp, eng: build_model(mo, g, tp, k2024[g], eng), decode_anchors(ref),
                     gpu=(0.0, 0.0, 0.0), per_degree=False)  # V0: one synchronous term, one latency

    def strip(k: KernelParams) -> dict:
        d = k.to_dict()
        d.pop("allreduce_latency_s")
        d.pop("allreduce_gbytes_per_s")
        return {kk: float(v) for kk, v in d.items()}

    return {
        "version": datetime.now(UTC).strftime("%Y%m%d"),
        "description": "Fitted by python -m inferencegym.sim.calibration.fit on Vidur profiles "
                       "(A100/H100 kernels, all-reduce; the H100's 2024 GEMMs), the measured H200 Llama-2-7B "
                       "rows (H200 kernels, Hopper attention), the project's measured H100 Llama-2-7B rows "
                       "(today's H100 GEMMs), SplitwiseSim end-to-end times (engine profile "
                       "vllm-2023), vLLM performance-CI latencies and the BLIS vLLM-V1 H100 decode "
                       "steps at TP2/TP4 (engine profile vllm-v1).",
        "heldout_vidur": [list(h) for h in HELDOUT_VIDUR],
        "heldout_splitwise": [list(h) for h in HELDOUT_SPLITWISE],
        "gpus": {g: strip(kernels[g]) for g in CALIBRATED_GPUS},
        "attention_family": dict(ATTENTION_FAMILY),
        "profile_elementwise": profile_elem,
        "default_gpu": strip(kernels["default"]),
        "network": network,
        "engines": {"vllm-2023": engine.to_dict(), "vllm-v1": v1.to_dict(),
                    "vllm-v0": {"fixed_s": v0.fixed_s, "allreduce_latency_s": v0.allreduce_latency_s}},
        "engine_attention": {"vllm-2023": "a100-80gb"},
        "engine_gemm": {p: era_2024 for p in ERA_2024_ENGINES},
    }


def default_output() -> Path:
    return Path(__file__).resolve().parents[2] / "data" / "calibration.json"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference-dir", type=Path, default=R.default_reference_dir())
    ap.add_argument("--out", type=Path, default=default_output())
    args = ap.parse_args(argv)
    from rich.console import Console

    console = Console()
    with console.status("fitting") as status:
        cal = fit_all(args.reference_dir, progress=lambda m: status.update(f"fitting {m}"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
