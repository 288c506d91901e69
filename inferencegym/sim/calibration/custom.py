"""A GPU preset fitted on your own measurements (``benchmarks/gpu_profile.py`` output).

    inferencegym calibrate --profile my_gpu.json --gpu my-gpu --fp16-tflops 989 \\
        --mem-gbytes-per-s 4800 --memory-gb 141 --out my_gpu_calibration.json

then, in Python, ``load_gpu_calibration("my_gpu_calibration.json")`` registers ``my-gpu`` for
``ExecutionModel.from_preset(gpu="my-gpu")`` (and ``ReplicaConfig(gpu="my-gpu")``) in this process.
The fit is ``gpu_fit.fit_gpu_profile`` (GEMMs and attention on the per-op rows; the engine's fused
elementwise efficiencies from a base GPU of the same family; the profiler's own elementwise set on
the whole-model rows). The file also records the fitted MAPE per op family, which
``ExecutionModel.calibration_error()`` then reports.
"""

from __future__ import annotations

import json
from pathlib import Path

from inferencegym.sim.calibration import evaluate as E
from inferencegym.sim.calibration import reference as R
from inferencegym.sim.calibration.gpu_fit import fit_gpu_profile
from inferencegym.sim.calibration_error import register_gpu_errors
from inferencegym.sim.execution_params import _params_for, register_gpu_kernel
from inferencegym.sim.presets import GB, GPUPreset, get_gpu, register_gpu

_SPEC_KEYS = ("fp16_tflops", "int8_tops", "mem_gbytes_per_s", "memory_gbytes", "intra_node_gbytes_per_s",
              "inter_node_gbytes_per_s", "gpu_hour_usd", "network_profile")


def gpu_preset(name: str, *, fp16_tflops: float | None = None, mem_gbytes_per_s: float | None = None,
               memory_gb: float | None = None, base_gpu: str = "h100-80gb",
               gpu_hour_usd: float | None = None) -> GPUPreset:
    """The preset ``name`` if it exists (spec figures given override it), else a new one from the
    given datasheet figures (links, network and price from ``base_gpu`` unless given)."""
    try:
        old = get_gpu(name)
    except ValueError:
        old = None
    base = get_gpu(base_gpu)
    src = old or base
    if old is None and None in (fp16_tflops, mem_gbytes_per_s, memory_gb):
        raise ValueError(f"gpu {name!r} is not a preset: give its datasheet figures (--fp16-tflops, "
                         f"--mem-gbytes-per-s, --memory-gb), got {fp16_tflops}, {mem_gbytes_per_s}, {memory_gb}")
    kw = {k: getattr(src, k) for k in _SPEC_KEYS}
    if fp16_tflops is not None:
        kw["fp16_tflops"], kw["int8_tops"] = float(fp16_tflops), 2.0 * float(fp16_tflops)
    if mem_gbytes_per_s is not None:
        kw["mem_gbytes_per_s"] = float(mem_gbytes_per_s)
    if memory_gb is not None:
        kw["memory_gbytes"] = float(memory_gb)
    if gpu_hour_usd is not None:
        kw["gpu_hour_usd"] = float(gpu_hour_usd)
    mem_bytes = src.memory_bytes if memory_gb is None else float(memory_gb) * GB
    return GPUPreset(name=name, memory_bytes=mem_bytes, calibrated=True, **kw)


def fit_custom_gpu(profile: Path, preset: GPUPreset, *, base_gpu: str = "h100-80gb") -> dict:
    """Fit ``preset``'s kernels on a GPU profile file; returns the calibration file's content
    (``preset``, ``kernel``, ``profile_elementwise``, ``errors``) and registers the GPU here."""
    info, rows = R.gpu_profile(profile)
    base_preset = get_gpu(base_gpu)
    base, _, _ = _params_for(base_preset.name, preset.network_profile, "kernel-only")
    register_gpu(preset, replace=True)
    kernel, pe = fit_gpu_profile(rows, preset.name, base)
    kd = {k: v for k, v in kernel.to_dict().items() if not k.startswith("allreduce")}
    register_gpu_kernel(preset.name, kd)
    err = E.gpu_profile_errors(rows, preset.name, pe)
    ops = {}
    for fam in ("gemm", "attn_prefill", "attn_decode"):
        d = err[err["family"] == fam]
        if len(d):
            ops[fam] = {"mape_pct": round(float(d["ape"].mean()), 2), "heldout_mape_pct": None,
                        "rows": len(d), "status": "fitted", "models": sorted(set(d["model"])),
                        "tps": sorted(int(t) for t in set(d["tp"])), "source": f"profile {Path(profile).name}"}
    whole = {f"{fam}{'_heldout' if held else ''}": round(float(d["ape"].mean()), 2)
             for (fam, held), d in err[err["family"].str.startswith("model")].groupby(["family", "heldout"])}
    out = {"preset": preset.to_dict(), "kernel": kd, "profile_elementwise": pe,
           "errors": {"ops": ops, "whole_model": whole}, "base_gpu": base_gpu, "profile_info": info}
    ops["elementwise"] = {**E.load_error_table_ops(base_gpu)["elementwise"], "status": "transferred",
                          "source": f"{base_gpu} fused-kernel efficiencies against this GPU's bandwidth"}
    register_gpu_errors(preset.name, ops)
    return out


def load_gpu_calibration(path: Path) -> GPUPreset:
    """Register the GPU of a file written by ``inferencegym calibrate --profile`` in this process."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"GPU calibration file not found: {p} (write one with "
                                f"`inferencegym calibrate --profile ... --out {p}`)")
    d = json.loads(p.read_text())
    missing = [k for k in ("preset", "kernel", "errors") if k not in d]
    if missing:
        raise ValueError(f"{p}: not a GPU calibration file, missing {missing}")
    preset = register_gpu(GPUPreset(**d["preset"]), replace=True)
    register_gpu_kernel(preset.name, d["kernel"])
    register_gpu_errors(preset.name, d["errors"]["ops"])
    return preset
