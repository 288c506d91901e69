"""Fitting and generating: fidelity on the Azure traces and on traces the fit never saw,
determinism, the shipped default fits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferencegym.workload import Workload, load_trace
from inferencegym.workload.fidelity import fidelity, median_fidelity
from inferencegym.workload.fit import WorkloadFit, default_fit, fit_workload, generate
from inferencegym.workload.stats import trace_stats

AZ = "traces/azure_llm_2023/AzureLLMInferenceTrace_{}.csv"
SEEDS = range(5)


def _ref_as_stats(ref: dict) -> dict:
    """trace_stats.json entry -> the shape of our trace_stats (for fidelity)."""
    return {"rate_mean_per_s": ref["rate_mean_per_s"], "iat_cv": ref["iat_s"]["cv"],
            "peak_to_mean_10s": ref["burstiness"]["peak_to_mean_10s"],
            "prompt_tokens": {q: ref["prompt_tokens"][q] for q in ("p50", "p90", "p99")},
            "output_tokens": {q: ref["response_tokens"][q] for q in ("p50", "p90", "p99")}}


def _failures(result: dict) -> dict:
    return {k: (round(v["gen"], 4), round(v["ref"], 4), f"{v['rel_err']:+.1%}") for k, v in result.items()
            if not v["ok"]}


@pytest.mark.parametrize("kind", ["code", "conv"])
def test_fit_then_generate_one_hour_matches_azure(reference_dir, kind):
    """Median over 5 one-hour draws within: rate 10 %, length p50/p90/p99 15 %, IAT CV 25 %,
    peak-to-mean 30 % of the figures in trace_stats.json. (Per-seed pass rates are in
    docs/bench/workload.md: the bursty code trace's peak-to-mean is set by one 10-s bin.)"""
    ref = json.loads((reference_dir / "trace_stats.json").read_text())["traces"][f"azure2023_{kind}"]
    fit = fit_workload(load_trace(reference_dir / AZ.format(kind), format="azure"))
    gens = [trace_stats(generate(fit, 3600.0, np.random.default_rng(s))) for s in SEEDS]
    res = median_fidelity(gens, _ref_as_stats(ref))
    assert not _failures(res), _failures(res)
    # every single draw keeps the rate and length percentiles
    for g in gens:
        single = fidelity(g, _ref_as_stats(ref))
        assert all(single[k]["ok"] for k in single if k not in ("iat_cv", "peak_to_mean_10s")), _failures(single)
    # prompt-output rank correlation reproduced by the copula
    w = generate(fit, 3600.0, np.random.default_rng(0))
    assert trace_stats(w)["prompt_output_spearman"] == pytest.approx(ref["prompt_response_corr"]["spearman"], abs=0.05)


def _arxiv_lengths(ref, n, rng):
    import pyarrow.csv as pcsv
    t = pcsv.read_csv(ref / "vidur/data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv")
    p, o = t["num_prefill_tokens"].to_numpy(), t["num_decode_tokens"].to_numpy()
    i = rng.integers(0, p.size, n)
    return p[i], o[i]


@pytest.mark.parametrize("name", ["language__m-large", "reason__deepseek-r1", "multimodal__mm-image"])
def test_unseen_family_servegen_with_arxiv_lengths(reference_dir, name):
    """A trace family no part of the fitting was developed on: request-level arrivals drawn from
    ServeGen's per-client window laws (8 clients, 20:00-21:00) with arXiv-summarisation lengths."""
    from inferencegym.workload.servegen import servegen_arrivals

    rng = np.random.default_rng(123)
    a = servegen_arrivals(reference_dir / f"traces/servegen/{name}__windows.parquet", start_s=72000,
                          duration_s=3600, rng=rng, max_clients=8)
    assert a.size > 1000
    w = Workload.from_arrays(a, *_arxiv_lengths(reference_dir, a.size, rng))
    fit = fit_workload(w)
    gens = [trace_stats(generate(fit, 3600.0, np.random.default_rng(s))) for s in SEEDS]
    res = median_fidelity(gens, trace_stats(w))
    assert not _failures(res), _failures(res)


def test_unseen_half_of_conv_arrivals(reference_dir):
    """Fit the first half hour of the conversation trace, compare generated arrivals with the
    second half (lengths drift between the halves in the data itself: prompt p90 differs by
    ~70 %, so only the arrival figures are checked)."""
    w = load_trace(reference_dir / AZ.format("conv"), format="azure")
    first, second = w.window(0, w.span_s / 2), w.window(w.span_s / 2, w.span_s)
    fit = fit_workload(first)
    gens = [trace_stats(generate(fit, 3600.0, np.random.default_rng(s))) for s in SEEDS]
    res = median_fidelity(gens, trace_stats(second))
    for k in ("rate_mean_per_s", "iat_cv", "peak_to_mean_10s"):
        assert res[k]["ok"], (k, res[k])


def test_generate_is_deterministic_and_seed_sensitive():
    fit = default_fit("azure_code")
    a = generate(fit, 600.0, np.random.default_rng(7))
    b = generate(fit, 600.0, np.random.default_rng(7))
    c = generate(fit, 600.0, np.random.default_rng(8))
    for col in ("arrival_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
    assert len(a) != len(c) or not np.array_equal(a.arrival_s, c.arrival_s)
    assert np.all(np.diff(a.arrival_s) >= 0) and a.arrival_s.min() >= 0 and a.arrival_s.max() < 600
    assert a.prompt_tokens.min() >= 1 and a.output_tokens.min() >= 1
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        generate(fit, 10.0, 7)


def test_shipped_fits_are_reproducible_from_the_reference(reference_dir, tmp_path):
    """The package data is exactly what the fitting code makes of the reference traces."""
    from inferencegym.workload import shipped

    paths = shipped.build(reference_dir, tmp_path)
    for p in paths:
        name = p.stem
        rebuilt = json.loads(p.read_text())
        assert _close(rebuilt, default_fit(name).to_dict()), f"{name}: rerun python -m inferencegym.workload.shipped"


def _close(a, b, rel=1e-7) -> bool:
    """Nested equality, floats to ``rel`` (scipy/numpy builds may differ in the last digits)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=rel, abs=1e-12, nan_ok=True)
    return a == b


def test_default_fits_rate_and_defaults():
    conv, code = default_fit("azure_conv"), default_fit("azure_code")
    assert conv.arrival["rate_per_s"] == pytest.approx(5.53, rel=0.01)
    assert code.arrival["rate_per_s"] == pytest.approx(2.567, rel=0.01)
    w = generate("azure_conv", 1800.0, np.random.default_rng(0))
    assert len(w) / 1800 == pytest.approx(5.53, rel=0.05)
    with pytest.raises(ValueError, match="unknown default fit 'x'; valid: azure_code, azure_conv"):
        default_fit("x")


def test_with_rate_rescales(tmp_path):
    fit = default_fit("azure_code").with_rate(10.0)
    w = generate(fit, 3600.0, np.random.default_rng(1))
    assert len(w) / 3600 == pytest.approx(10.0, rel=0.05)
    fit.save(tmp_path / "f.json")
    assert WorkloadFit.load(tmp_path / "f.json").to_dict() == fit.to_dict()


def test_bad_fit_files(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        WorkloadFit.load(p)
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="not a workload fit"):
        WorkloadFit.load(p)
    d = default_fit("azure_conv").to_dict()
    d["arrival"] = {"kind": "teleport"}
    with pytest.raises(ValueError, match="unknown arrival process 'teleport'; valid:"):
        WorkloadFit.from_dict(d)
    with pytest.raises(ValueError, match="at least 3 requests"):
        fit_workload(Workload.from_arrays([0.0, 1.0], [1, 1], [1, 1]))


@pytest.mark.parametrize("duration_s", [5.0, 15.0, 95.0])
def test_generate_keeps_the_rate_for_durations_off_the_bin_grid(duration_s):
    n = [len(generate("azure_conv", duration_s, np.random.default_rng(s))) for s in range(100)]
    assert np.mean(n) / duration_s == pytest.approx(5.53, rel=0.05)
    w = generate("azure_conv", duration_s, np.random.default_rng(0))
    assert w.arrival_s.max() < duration_s
