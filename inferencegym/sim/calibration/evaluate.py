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
from inferencegym.sim.calibration.fit import build_model, is_heldout_splitwise, is_heldout_vidur
from inferencegym.sim.execution import _params_for
from inferencegym.sim.presets import get_gpu


def committed_model(model: str, gpu: str, tp: int, *, engine_overhead: bool):
    """Model with the committed calibration; no memory check (kernel profiles include 70B at TP1)."""
    g = get_gpu(gpu)
    kernel, engine, _ = _params_for(g.name, g.network_profile)
    return build_model(model, gpu, tp, kernel, engine if engine_overhead else None)


def _finish(d: pd.DataFrame) -> pd.DataFrame:
    d["ape"] = 100.0 * (d["predicted_s"] - d["measured_s"]).abs() / d["measured_s"]
    return d


def ops_errors(ref: Path) -> pd.DataFrame:
    """Per-op, per-layer kernel times vs Vidur ``mlp.csv`` (every GPU/model/TP/token count)."""
    ops = R.vidur_ops(ref)
    parts = []
    for (gpu, model, tp), g in ops.groupby(["gpu", "model", "tp"]):
        m = committed_model(model, gpu, int(tp), engine_overhead=False)
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
