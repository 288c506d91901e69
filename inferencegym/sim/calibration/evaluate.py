"""Error of the committed calibration against the reference data (used by tests and the report).

Every function takes the reference folder, predicts with the calibration committed in
``inferencegym/data/calibration.json`` (through :class:`ExecutionModel`), and returns a DataFrame
with ``measured_s``, ``predicted_s``, ``ape`` (absolute percentage error, %) and ``heldout``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from inferencegym.sim.calibration import reference as R
from inferencegym.sim.calibration.engines import VLLM_CI_LATENCY, fixed_batch_latency_s
from inferencegym.sim.calibration.fit import (
    build_model,
    is_heldout_splitwise,
    is_heldout_vidur,
)
from inferencegym.sim.calibration.gpu_fit import (
    WHOLE_OPS,
    is_fit_whole_row,
    whole_model_time_s,
    with_profile_elementwise,
)
from inferencegym.sim.calibration_error import load_error_table
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_params import KernelParams, _params_for, load_calibration
from inferencegym.sim.presets import get_gpu


def committed_model(model: str, gpu: str, tp: int, *, engine_overhead: bool,
                    engine_profile: str = "vllm-2023", kernel_era: str = "kernel-only"):
    """Model with the committed calibration; no memory check (kernel profiles include 70B at TP1).
    ``engine_overhead=True`` adds ``engine_profile``'s overhead (and its attention generation);
    without it the kernels are those of ``kernel_era`` (``kernel-only``: today's; ``vllm-2023``: the
    2023-24 software generation's, e.g. the H100 GEMMs of Vidur's 2024 profile)."""
    g = get_gpu(gpu)
    kernel, engine, _ = _params_for(g.name, g.network_profile,
                                    engine_profile if engine_overhead else kernel_era)
    return build_model(model, gpu, tp, kernel, engine if engine_overhead else None)


def _finish(d: pd.DataFrame) -> pd.DataFrame:
    d["ape"] = 100.0 * (d["predicted_s"] - d["measured_s"]).abs() / d["measured_s"]
    return d


def ops_errors(ref: Path) -> pd.DataFrame:
    """Per-op, per-layer kernel times vs Vidur ``mlp.csv`` (every GPU/model/TP/token count)."""
    ops = R.vidur_ops(ref)
    parts = []
    for (gpu, model, tp), g in ops.groupby(["gpu", "model", "tp"]):
        # Vidur profiled 2024's kernels: its rows check the fit of that generation
        m = committed_model(model, gpu, int(tp), engine_overhead=False, kernel_era="vllm-2023")
        g = g.copy()
        pred = np.empty(len(g))
        for op, idx in g.groupby("op").groups.items():
            loc = g.index.get_indexer(idx)
            pred[loc] = m.layer_op_times_s(g.loc[idx, "n"].to_numpy(float))[op]
        g["predicted_s"] = pred
        g["heldout"] = is_heldout_vidur(gpu, model, int(tp))
        parts.append(g)
    return _finish(pd.concat(parts, ignore_index=True))


def allreduce_errors(ref: Path) -> pd.DataFrame:
    ar = R.vidur_allreduce(ref).copy()
    fam_gpu = {"a100": "a100-80gb", "h100": "h100-80gb"}
    pred = []
    for r in ar.itertuples(index=False):
        k, _, _ = _params_for(fam_gpu[r.profile], r.profile)
        lat, bw = k.allreduce(int(r.tp))
        pred.append(lat + r.bytes / bw)
    ar["predicted_s"] = pred
    ar["heldout"] = False
    return _finish(ar)


def attention_errors(ref: Path) -> pd.DataFrame:
    m = committed_model("llama-2-7b", "a100-80gb", 1, engine_overhead=False)
    dec = R.vidur_attention_decode(ref).copy()
    dec["predicted_s"] = m.attention_decode_layer_s(dec["batch"].to_numpy(float),
                                                    (dec["batch"] * dec["context"]).to_numpy(float))
    dec["kind"] = "decode"
    pf = R.vidur_attention_prefill(ref).copy()
    pf["predicted_s"] = [m.attention_prefill_layer_s([(int(n), int(c))])
                         for n, c in zip(pf["chunk"], pf["context"])]
    pf["kind"] = "prefill"
    d = pd.concat([dec, pf], ignore_index=True)
    d["heldout"] = False
    return _finish(d)


def iteration_errors(ref: Path) -> pd.DataFrame:
    """Whole-iteration kernel time (32 layers x (linear ops + attention), no engine overhead, no
    LM head) vs Vidur's derived iteration reference (Llama-2-7B, A100, TP1)."""
    d = R.vidur_iteration_reference(ref).copy()
    m = committed_model("llama-2-7b", "a100-80gb", 1, engine_overhead=False)
    L = m.model.num_layers
    pred = []
    for r in d.itertuples(index=False):
        if r.kind == "decode":
            n = int(r.batch)
            attn = m.attention_decode_layer_s(n, n * int(r.context))
        else:
            n = int(r.tokens)
            attn = m.attention_prefill_layer_s([(n, int(r.context))])
        linear = sum(v for k, v in m.layer_op_times_s(n).items() if k != "all_reduce")
        pred.append(L * (linear + attn))
    d["predicted_s"] = pred
    d["heldout"] = False
    return _finish(d)


def splitwise_errors(ref: Path, include_excluded: bool = False) -> pd.DataFrame:
    """End-to-end prefill (whole batch) and decode (per iteration, mean context) times with the
    engine overhead vs SplitwiseSim's measurements."""
    d = R.splitwise_times(ref)
    if not include_excluded:
        d = d[d["excluded"] == ""]
    d = d.copy()
    pred, cache = [], {}
    for r in d.itertuples(index=False):
        key = (r.model, r.gpu, r.tp)
        if key not in cache:
            cache[key] = committed_model(r.model, r.gpu if not r.gpu.endswith("-pcap") else r.gpu[:-5],
                                         r.tp, engine_overhead=True)
        m = cache[key]
        if r.kind == "prefill":
            pred.append(m.iteration_time_s([(r.prompt, 0)] * r.batch, 0, 0, 0))
        else:
            pred.append(m.iteration_time_s((), r.batch, r.batch * (r.prompt + r.output / 2), 0))
    d["predicted_s"] = pred
    d["heldout"] = [is_heldout_splitwise(m_, g, t) for m_, g, t in zip(d["model"], d["gpu"], d["tp"])]
    return _finish(d)


def summarise(d: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """MAPE, max APE and row count, overall or per group."""
    agg = dict(mape_pct=("ape", "mean"), max_ape_pct=("ape", "max"), rows=("ape", "size"))
    if not by:
        return pd.DataFrame([{"mape_pct": d["ape"].mean(), "max_ape_pct": d["ape"].max(),
                              "rows": len(d)}])
    return d.groupby(by).agg(**agg).reset_index()


def gpu_profile_errors(rows: pd.DataFrame, gpu: str, profile_elementwise: dict | None = None) -> pd.DataFrame:
    """A GPU profile's rows (``reference.gpu_profile``) against the committed calibration of
    ``gpu``, kernel only. Per-op rows use the preset's kernels; whole-model rows use the profile's
    own (unfused) elementwise parameters when the calibration has them. ``family``: gemm,
    attn_prefill, attn_decode, model_prefill, model_prefill_cached, model_decode; ``heldout``:
    whole-model rows outside the elementwise fit (see ``gpu_fit.is_fit_whole_row``)."""
    g = get_gpu(gpu)
    kernel, _, _ = _params_for(g.name, g.network_profile, "kernel-only")
    pe = profile_elementwise or load_calibration().get("profile_elementwise", {}).get(gpu)
    whole_kernel = with_profile_elementwise(kernel, pe) if pe else kernel
    models: dict = {}
    pred, fam, held = [], [], []
    for r in rows.itertuples(index=False):
        whole = r.op in WHOLE_OPS
        key = (r.model, int(r.tp), whole)
        if key not in models:
            models[key] = build_model(r.model, gpu, int(r.tp), whole_kernel if whole else kernel)
        m = models[key]
        if r.op in R.GEMM_OPS:
            pred.append(float(m.layer_op_times_s(float(r.n_tokens))[r.op]))
            fam.append("gemm")
        elif r.op == "attn_decode":
            pred.append(m.attention_decode_layer_s(r.batch, r.batch * r.context))
            fam.append("attn_decode")
        elif r.op == "attn_prefill":
            pred.append(m.attention_prefill_layer_s([(r.chunk, r.context)]))
            fam.append("attn_prefill")
        else:
            pred.append(whole_model_time_s(m, r.op, r.prompt_tokens, r.batch, r.context))
            fam.append(r.op)
        held.append(whole and not is_fit_whole_row(r.op, r.prompt_tokens))
    d = rows.copy()
    d["predicted_s"], d["family"], d["heldout"] = pred, fam, held
    return _finish(d)


def h200_errors(ref: Path) -> pd.DataFrame:
    """The shared H200 Llama-2-7B rows against the committed ``h200-141gb`` calibration."""
    return gpu_profile_errors(R.h200_profile(ref), "h200-141gb")


H200_FITTED = (("llama-2-7b", 1),)
"""(model, TP) pairs whose rows the ``h200-141gb`` fit saw (the shared file's model)."""


def measured_profile_errors(gpu: str = "h200-141gb", fitted=H200_FITTED) -> pd.DataFrame:
    """The project's own measured profiles of ``gpu`` (``reference.measured_profiles``) against
    its committed calibration, kernel only (as :func:`gpu_profile_errors`). ``model_heldout``:
    the row's (model, TP) is not among ``fitted`` (another shape, GQA, or a TP shard); rows of a
    fitted pair re-measure the fitted shapes on another machine and day."""
    rows = R.measured_profiles(gpu)
    d = gpu_profile_errors(rows.drop(columns=["file"]), gpu)
    d["file"] = rows["file"].to_numpy()
    pairs = set(fitted)
    d["model_heldout"] = [(m, int(t)) not in pairs for m, t in zip(d["model"], d["tp"])]
    return d


def vllm_ci_errors(profiles=("vllm-v1", "vllm-2023", "kernel-only")) -> pd.DataFrame:
    """vLLM performance-CI fixed-batch latencies (``engines.VLLM_CI_LATENCY``) per engine profile,
    each scheduling synchronously as the CI's offline runs did (``engines.VLLM_V1_ASYNC_SCHEDULING``)."""
    rows = []
    for prof in profiles:
        for mo, g, tp, b, p, o, meas in VLLM_CI_LATENCY:
            m = ExecutionModel.from_preset(model=mo, gpu=g, tensor_parallel=tp, engine_profile=prof)
            m = m._replace(engine=m.engine.synchronous())
            rows.append({"engine_profile": prof, "model": mo, "gpu": g, "tp": tp,
                         "measured_s": meas, "predicted_s": fixed_batch_latency_s(m, b, p, o)})
    return _finish(pd.DataFrame(rows))


def cross_gpu_errors(ref: Path) -> pd.DataFrame:
    """Transfer check, the accuracy to expect of a spec-sheet GPU preset: H100 kernel rows (Vidur)
    predicted with the A100 efficiencies, and the H200 attention rows predicted with the A100
    attention fit. ``family``: gemm, elementwise, attn_prefill, attn_decode."""
    a100, _, _ = _params_for("a100-80gb", "a100", "kernel-only")
    h100, _, _ = _params_for("h100-80gb", "h100", "kernel-only")
    d = a100.to_dict()
    d["allreduce_latency_s"] = dict(h100.allreduce_latency_s)
    d["allreduce_gbytes_per_s"] = dict(h100.allreduce_gbytes_per_s)
    k = KernelParams.from_dict(d)
    ops = R.vidur_ops(ref)
    parts = []
    for (model, tp), g in ops[ops["gpu"] == "h100-80gb"].groupby(["model", "tp"]):
        m = build_model(model, "h100-80gb", int(tp), k)
        g = g.copy()
        g["predicted_s"] = [float(m.layer_op_times_s(float(n))[op]) for n, op in zip(g["n"], g["op"])]
        g["family"] = np.where(g["op"].isin(R.GEMM_OPS), "gemm", "elementwise")
        parts.append(g)
    rows = R.h200_profile(ref)
    att = rows[rows["op"].isin(("attn_decode", "attn_prefill"))].copy()
    m = build_model("llama-2-7b", "h200-141gb", 1, k)
    att["predicted_s"] = [m.attention_decode_layer_s(b, b * c) if op == "attn_decode"
                          else m.attention_prefill_layer_s([(n, c)])
                          for op, b, c, n in zip(att["op"], att["batch"], att["context"], att["chunk"])]
    att["family"] = att["op"]
    parts.append(att)
    return _finish(pd.concat(parts, ignore_index=True))


def load_error_table_ops(gpu: str) -> dict:
    """The committed per-family error entries of a calibrated GPU."""
    return load_error_table()["ops"][gpu]


def _band(d: pd.DataFrame) -> dict:
    fit, held = d[~d["heldout"]], d[d["heldout"]]
    return {"mape_pct": round(float(fit["ape"].mean()), 2) if len(fit) else None,
            "heldout_mape_pct": round(float(held["ape"].mean()), 2) if len(held) else None,
            "rows": len(d)}


def error_table(ref: Path) -> dict:
    """The committed calibration's measured errors per GPU and op family (what
    ``inferencegym/data/calibration_error.json`` holds; see ``uncertainty``)."""
    ops = ops_errors(ref)
    ops["family"] = np.where(ops["op"].isin(R.GEMM_OPS), "gemm", "elementwise")
    att = attention_errors(ref)
    h2 = h200_errors(ref)
    table: dict = {"ops": {}}
    for gpu in ("a100-80gb", "h100-80gb"):
        fams = {}
        for fam in ("gemm", "elementwise"):
            d = ops[(ops["gpu"] == gpu) & (ops["family"] == fam)]
            fit = d[~d["heldout"]]
            fams[fam] = {**_band(d), "status": "fitted", "models": sorted(set(fit["model"])),
                         "tps": sorted(int(t) for t in set(fit["tp"])),
                         "source": f"Vidur {gpu} kernel profiles (mlp.csv)"}
        table["ops"][gpu] = fams
    for kind in ("prefill", "decode"):
        a = att[att["kind"] == kind]
        table["ops"]["a100-80gb"][f"attn_{kind}"] = {
            **_band(a), "status": "fitted", "models": ["llama-2-7b"], "tps": [1],
            "source": "Vidur A100 Llama-2-7B attention samples"}
        h = h2[h2["family"] == f"attn_{kind}"]
        hop = {**_band(h), "models": ["llama-2-7b"], "tps": [1]}
        table["ops"]["h100-80gb"][f"attn_{kind}"] = {
            **hop, "status": "transferred", "source": "Hopper attention fitted on the H200 rows"}
        table["ops"].setdefault("h200-141gb", {})[f"attn_{kind}"] = {
            **hop, "status": "fitted", "source": "measured H200 Llama-2-7B rows"}
    g = h2[h2["family"] == "gemm"]
    table["ops"]["h200-141gb"]["gemm"] = {**_band(g), "status": "fitted", "models": ["llama-2-7b"],
                                          "tps": [1], "source": "measured H200 Llama-2-7B rows"}
    mp = measured_profile_errors("h200-141gb")
    other = mp[mp["model_heldout"]]
    for fam in ("gemm", "attn_prefill", "attn_decode"):
        o = other[other["family"] == fam]
        for gpu in ("h200-141gb", "h100-80gb") if fam != "gemm" else ("h200-141gb",):
            table["ops"][gpu][fam]["heldout_mape_pct"] = round(float(o["ape"].mean()), 2)
            table["ops"][gpu][fam]["heldout_models"] = sorted({f"{m} TP{t}" for m, t in zip(o["model"], o["tp"])})
    table["ops"]["h200-141gb"]["elementwise"] = {
        **table["ops"]["h100-80gb"]["elementwise"], "status": "transferred",
        "source": "H100 (vLLM fused kernels) efficiencies against H200 bandwidth"}
    table["whole_model"] = {"h200-141gb": {f"{fam}{'_heldout' if held else ''}": _band(d)["mape_pct"]
                                           if not held else _band(d)["heldout_mape_pct"]
                                           for (fam, held), d in h2[h2["family"].str.startswith("model")]
                                           .groupby(["family", "heldout"])}}
    wm = other[other["family"].str.startswith("model")]
    table["whole_model"]["h200-141gb"].update(
        {f"{fam}_other_models": round(float(d["ape"].mean()), 2) for fam, d in wm.groupby("family")})
    cg = cross_gpu_errors(ref)
    table["spec_sheet"] = {f: round(float(d["ape"].mean()), 2) for f, d in cg.groupby("family")}
    ar = allreduce_errors(ref)
    table["all_reduce"] = {p: round(float(d["ape"].mean()), 2) for p, d in ar.groupby("profile")}
    cal = load_calibration()
    table["network_of"] = {gg: get_gpu(gg).network_profile for gg in cal["gpus"]}
    sw = splitwise_errors(ref)
    ci = vllm_ci_errors(("vllm-v1",))
    ci0 = vllm_ci_errors(("vllm-v0",))  # the same figures over the 2024 kernels (calibration.fit)
    table["engines"] = {
        "vllm-v1": {"status": "fitted", "mape_pct": round(float(ci["ape"].max()), 2),
                    "source": "vLLM performance-CI fixed-batch latencies (band = max APE of 5 rows)"},
        "vllm-v0": {"status": "fitted", "mape_pct": round(float(ci0["ape"].max()), 2),
                    "source": "vLLM performance-CI fixed-batch latencies, synchronous (band = max APE of 5 rows)"},
        "vllm-2023": {"status": "fitted", "mape_pct": round(float(sw["ape"].mean()), 2),
                      "source": "SplitwiseSim end-to-end prefill/decode times (2023 engines)"}}
    hop_rng = {"prefill_tokens_max": 16384, "decode_context_max": 4096, "decode_batch_max": 256,
               "whole_model_prefill_max": 32768}
    table["ranges"] = {"a100-80gb": {"prefill_tokens_max": 4096, "decode_context_max": 4032,
                                     "decode_batch_max": 128},
                       "h100-80gb": hop_rng, "h200-141gb": hop_rng}
    table["version"] = cal.get("version", "")
    return table
