"""Loaders for the calibration reference data (``../shared/reference``; never copied into the repo).

Each loader returns a tidy pandas DataFrame with times in **seconds**:

* :func:`vidur_ops` -- Vidur's per-layer kernel profiles (``mlp.csv``): one row per
  (gpu, model, tp, num_tokens, op) with the median over Vidur's repeats.
* :func:`vidur_allreduce` -- NCCL all-reduce medians vs message bytes (DGX profiles, all GPUs of a
  TP group in one node).
* :func:`vidur_attention_decode` / :func:`vidur_attention_prefill` -- the hand-transcribed
  attention samples (A100, Llama-2-7B, TP1).
* :func:`vidur_iteration_reference` -- the derived per-iteration reference table.
* :func:`splitwise_times` -- SplitwiseSim's measured end-to-end prefill/decode times (median of the
  five repeats), with the rows we exclude flagged in ``excluded`` (and why).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
       "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEM_OPS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")

VIDUR_GPU = {"a100": "a100-80gb", "h100": "h100-80gb"}
VIDUR_MODEL = {"Llama-2-7b-hf": "llama-2-7b", "Llama-2-70b-hf": "llama-2-70b",
               "Meta-Llama-3-8B": "llama-3-8b", "Meta-Llama-3-70B": "llama-3-70b"}
VIDUR_NETWORK = {"a100": "a100_dgx", "h100": "h100_dgx"}
SPLITWISE_MODEL = {"llama2-70b": "llama-2-70b", "bloom-176b": "bloom-176b"}


def default_reference_dir() -> Path:
    """``$INFERENCEGYM_REFERENCE_DIR`` or ``../shared/reference`` beside the repository."""
    env = os.environ.get("INFERENCEGYM_REFERENCE_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "shared" / "reference"


def _need(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"calibration reference file missing: {path} (expected the shared "
                                f"reference folder; set INFERENCEGYM_REFERENCE_DIR)")
    return path


def vidur_ops(ref: Path) -> pd.DataFrame:
    """Per-layer op medians from every ``data/profiling/compute/<gpu>/meta-llama/<model>/mlp.csv``."""
    root = _need(Path(ref) / "vidur" / "data" / "profiling" / "compute")
    frames = []
    for csv in sorted(root.glob("*/meta-llama/*/mlp.csv")):
        gpu = VIDUR_GPU.get(csv.parts[-4])
        model = VIDUR_MODEL.get(csv.parts[-2])
        if gpu is None or model is None:
            continue
        cols = ["num_tokens", "num_tensor_parallel_workers"] + [f"time_stats.{o}.median" for o in OPS]
        d = pd.read_csv(csv, usecols=cols)[cols]
        d.columns = ["n", "tp"] + list(OPS)
        d = d.groupby(["n", "tp"], as_index=False).median()
        long = d.melt(id_vars=["n", "tp"], var_name="op", value_name="measured_s")
        long["measured_s"] = long["measured_s"] * 1e-3
        long["gpu"], long["model"] = gpu, model
        frames.append(long)
    if not frames:
        raise FileNotFoundError(f"no Vidur mlp.csv profiles under {root}")
    out = pd.concat(frames, ignore_index=True)
    return out[["gpu", "model", "tp", "n", "op", "measured_s"]]


def vidur_allreduce(ref: Path) -> pd.DataFrame:
    """All-reduce medians (s) vs ``size`` bytes for TP groups inside one node, per GPU family."""
    frames = []
    for fam, folder in VIDUR_NETWORK.items():
        f = _need(Path(ref) / "vidur" / "data" / "profiling" / "network" / folder / "all_reduce.csv")
        d = pd.read_csv(f)
        d = d[d["num_workers"] == d["devices_per_node"]]
        d = d.groupby(["num_workers", "size"], as_index=False)["time_stats.all_reduce.median"].median()
        d.columns = ["tp", "bytes", "measured_s"]
        d["measured_s"] *= 1e-3
        d["profile"] = fam
        frames.append(d)
    return pd.concat(frames, ignore_index=True)


def vidur_attention_decode(ref: Path) -> pd.DataFrame:
    f = _need(Path(ref) / "vidur" / "derived" / "llama2_7b_a100_tp1_attention_decode_samples.csv")
    d = pd.read_csv(f)
    return pd.DataFrame({"batch": d["batch_size"], "context": d["kv_cache_size"],
                         "measured_s": d["attn_decode_median_ms"] * 1e-3})


def vidur_attention_prefill(ref: Path) -> pd.DataFrame:
    f = _need(Path(ref) / "vidur" / "derived" / "llama2_7b_a100_tp1_attention_prefill_samples.csv")
    d = pd.read_csv(f)
    return pd.DataFrame({"chunk": d["prefill_chunk_size"], "context": d["kv_cache_size"],
                         "measured_s": d["attn_prefill_median_ms"] * 1e-3})


def vidur_iteration_reference(ref: Path) -> pd.DataFrame:
    f = _need(Path(ref) / "vidur" / "derived" / "llama2_7b_a100_tp1_iteration_reference.csv")
    d = pd.read_csv(f)
    d["measured_s"] = d["iteration_ms"] * 1e-3
    return d


def splitwise_times(ref: Path) -> pd.DataFrame:
    """Median (over repeats) prefill and decode times per configuration, long format.

    Columns: model (preset name), gpu, tp, prompt, batch, output, kind (prefill/decode),
    measured_s, excluded (reason string, empty when used).
    Exclusions: the power-capped H100 rows (we do not model power caps) and one inconsistent
    configuration (Llama-2-70B TP2 batch 64 prompt 512: prefill 0.79 s although batch 32 takes
    6.6 s, decode 67 ms although batch 32 takes 72 ms).
    """
    f = _need(Path(ref) / "splitwise" / "perf_model_subset.csv")
    d = pd.read_csv(f)
    keys = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    g = d.groupby(keys, as_index=False)[["prompt_time", "token_time"]].median()
    rows = []
    for r in g.itertuples(index=False):
        base = dict(model=SPLITWISE_MODEL[r.model], gpu=r.hardware, tp=int(r.tensor_parallel),
                    prompt=int(r.prompt_size), batch=int(r.batch_size), output=int(r.token_size))
        excl = ""
        if r.hardware.endswith("-pcap"):
            excl = "power-capped GPU (not modelled)"
        if (not excl and r.model == "llama2-70b" and r.tensor_parallel == 2 and r.batch_size == 64
                and r.prompt_size == 512):
            excl = "inconsistent measurement (prefill and decode faster than at batch 32)"
        rows.append({**base, "kind": "prefill", "measured_s": r.prompt_time * 1e-3, "excluded": excl})
        rows.append({**base, "kind": "decode", "measured_s": r.token_time * 1e-3, "excluded": excl})
    return pd.DataFrame(rows)


H200_PROFILE = ("h200", "h200_llama2_7b_profile.json")
PROFILE_KEYS = {  # op -> the keys a row of a GPU profile file carries besides model, tp, op, time_s
    "attn_pre_proj": ("n_tokens",), "attn_post_proj": ("n_tokens",), "mlp_up_proj": ("n_tokens",),
    "mlp_down_proj": ("n_tokens",), "attn_prefill": ("chunk", "context"),
    "attn_decode": ("batch", "context"), "model_prefill": ("prompt_tokens",),
    "model_prefill_cached": ("prompt_tokens", "context"), "model_decode": ("batch", "context"),
}


def gpu_profile(path: Path) -> tuple[dict, pd.DataFrame]:
    """A GPU profile file (the schema of ``h200/h200_llama2_7b_profile.json``, written by
    ``benchmarks/gpu_profile.py``): ``(info, rows)`` with one row per measurement, columns model,
    tp, op, n_tokens, chunk, context, batch, prompt_tokens (0 where not applicable), measured_s.
    Raises ValueError naming the first malformed row."""
    import json

    data = json.loads(_need(Path(path)).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or not data["rows"]:
        raise ValueError(f"{path}: expected a JSON object with a non-empty 'rows' list "
                         f"(written by benchmarks/gpu_profile.py)")
    out = []
    for i, r in enumerate(data["rows"]):
        op = r.get("op") if isinstance(r, dict) else None
        if op not in PROFILE_KEYS:
            raise ValueError(f"{path}: row {i} has op {op!r}; valid: {', '.join(PROFILE_KEYS)}")
        need = ("model", "tp", "time_s") + PROFILE_KEYS[op]
        missing = [k for k in need if k not in r]
        if missing or not float(r["time_s"]) > 0:
            raise ValueError(f"{path}: row {i} ({op}) needs {list(need)} with time_s > 0; "
                             f"missing {missing}, time_s={r.get('time_s')!r}")
        row = {"model": r["model"], "tp": int(r["tp"]), "op": op, "measured_s": float(r["time_s"])}
        for k in ("n_tokens", "chunk", "context", "batch", "prompt_tokens"):
            row[k] = int(r.get(k, 0))
        out.append(row)
    return dict(data.get("info", {})), pd.DataFrame(out)


MEASURED_PROFILES = Path(__file__).resolve().parents[2] / "data" / "gpu_profiles"
"""The project's own GPU profiles (``<gpu>/*.json``, measured on lent GPUs; see each folder's README)."""


def measured_profiles(gpu: str) -> pd.DataFrame:
    """Every profile file committed for ``gpu`` (:data:`MEASURED_PROFILES`), rows as
    :func:`gpu_profile` returns them plus ``file``. Raises FileNotFoundError naming the folder."""
    folder = MEASURED_PROFILES / gpu
    files = sorted(folder.glob("*.json"))
    if not files:
        have = sorted(p.name for p in MEASURED_PROFILES.iterdir()) if MEASURED_PROFILES.is_dir() else []
        raise FileNotFoundError(f"no measured GPU profiles for {gpu!r} in {folder}; folders: {have}")
    frames = []
    for f in files:
        rows = gpu_profile(f)[1]
        rows["file"] = f.name
        frames.append(rows)
    return pd.concat(frames, ignore_index=True)


def h200_profile(ref: Path) -> pd.DataFrame:
    """The measured H200 Llama-2-7B rows (see :func:`gpu_profile`)."""
    return gpu_profile(Path(ref) / H200_PROFILE[0] / H200_PROFILE[1])[1]
