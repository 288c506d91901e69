"""Parquet pools and the `inferencegym data` commands."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from inferencegym.cli import app
from inferencegym.workload import load_trace
from inferencegym.workload.pool import pool_metadata, prepare, read_pool, write_pool

BURST = "burstgpt/BurstGPT_1_head400.csv"
CONV = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
runner = CliRunner()


def test_prepare_burstgpt_pool_schema_and_metadata(reference_dir, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "pool.parquet"
    meta = prepare(reference_dir / BURST, out, "burstgpt", keep_failed=True, block_size=4096)
    t = pq.read_table(out)
    assert t.column_names == ["arrival_s", "prompt_tokens", "output_tokens", "model", "log_type", "tenant",
                              "priority"]
    assert str(t.schema.field("arrival_s").type) == "double"
    assert str(t.schema.field("prompt_tokens").type) == "int64"
    assert t.num_rows == 400
    assert meta["source"] == {"file": "BurstGPT_1_head400.csv", "format": "burstgpt", "size_bytes": 16840,
                              "rows_in_file": 400, "rows_written": 400, "failed_dropped": 0, "keep_failed": True}
    assert pool_metadata(out) == json.loads(json.dumps(meta))
    w = read_pool(out)
    src = load_trace(reference_dir / BURST, format="burstgpt", keep_failed=True)
    np.testing.assert_array_equal(w.arrival_s, src.arrival_s)
    np.testing.assert_array_equal(w.output_tokens, src.output_tokens)
    np.testing.assert_array_equal(w.label("model"), src.label("model"))
    assert int(w.failed.sum()) == 17 and len(read_pool(out, drop_failed=True)) == 383
    # readable by scripts outside the project
    import pandas as pd
    df = pd.read_parquet(out)
    assert df["arrival_s"].iloc[-1] == 37269.0 and set(df["model"]) == {"ChatGPT", "GPT-4"}


def test_pool_window_and_time_scale(reference_dir, tmp_path):
    out = tmp_path / "conv.parquet"
    prepare(reference_dir / CONV, out, "azure")
    full = read_pool(out)
    w = read_pool(out, start_s=600.0, duration_s=300.0, time_scale=0.5)
    ref = full.window(600.0, 300.0)
    assert len(w) == len(ref) > 1000
    np.testing.assert_allclose(w.arrival_s, ref.arrival_s * 0.5)
    assert w.arrival_s.min() >= 0 and w.arrival_s.max() < 150
    assert pool_metadata(out)["stats"]["rate_mean_per_s"] == pytest.approx(5.5304, rel=1e-3)


def test_prepare_error_leaves_nothing_behind(tmp_path):
    hdr = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    rows = [f"{i},ChatGPT,10,5,15,API log\n" for i in range(20000)]
    rows[15000] = "15000,ChatGPT,10,-5,5,API log\n"
    src = tmp_path / "bad.csv"
    src.write_text(hdr + "".join(rows))
    out = tmp_path / "out" / "pool.parquet"
    with pytest.raises(ValueError, match=r"row 15001 .*'Response tokens'"):
        prepare(src, out, "burstgpt", block_size=32 << 10)  # several blocks written before the error
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no temporary file left either
    # an existing pool is not clobbered by a failed prepare
    good = tmp_path / "good.csv"
    good.write_text(hdr + "".join(rows[:100]))
    prepare(good, out, "burstgpt")
    before = out.read_bytes()
    with pytest.raises(ValueError):
        prepare(src, out, "burstgpt", block_size=32 << 10)
    assert out.read_bytes() == before


def test_read_pool_errors(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1]}), p)
    with pytest.raises(ValueError, match="needs columns"):
        read_pool(p)
    with pytest.raises(ValueError, match="not an InferenceGym pool"):
        pool_metadata(p)
    q = tmp_path / "y.parquet"
    q.write_text("not parquet")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        read_pool(q)


def test_cli_generate_byte_identical(tmp_path):
    a, b, c = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    for out, seed in ((a, 5), (b, 5), (c, 6)):
        r = runner.invoke(app, ["data", "generate", "--fit", "azure_code", "--duration-s", "900",
                                "--seed", str(seed), "--output", str(out)])
        assert r.exit_code == 0, r.output
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    meta = pool_metadata(a)
    assert meta["source"]["seed"] == 5 and meta["source"]["fit"] == "azure_code"


def test_cli_fit_generate_compare_spikes(reference_dir, tmp_path):
    fit = tmp_path / "fit.json"
    r = runner.invoke(app, ["data", "fit", "--input", str(reference_dir / CONV), "--format", "azure",
                            "--output", str(fit)])
    assert r.exit_code == 0, r.output
    gen = tmp_path / "gen.csv"
    r = runner.invoke(app, ["data", "generate", "--fit", str(fit), "--duration-s", "1200", "--seed", "1",
                            "--output", str(gen), "--mega-prompt-tokens", "30000", "--mega-every-s", "100"])
    assert r.exit_code == 0, r.output
    w = load_trace(gen, format="replay")
    assert int((w.prompt_tokens == 30000).sum()) == 11  # at 100, 200, ..., 1100 s
    r = runner.invoke(app, ["data", "compare", str(reference_dir / CONV), str(gen), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["a"]["n_requests"] == 19366
    assert abs(res["rel_diff"]["rate_mean_per_s"]) < 0.1
    assert 0 <= res["ks"]["iat_s"]["pvalue"] <= 1 and 0 < res["ks"]["prompt_tokens"]["statistic"] < 0.1
    r = runner.invoke(app, ["data", "compare", str(reference_dir / CONV), str(gen)])
    assert r.exit_code == 0 and "peak-to-mean" in r.output
    r = runner.invoke(app, ["data", "spikes", str(reference_dir / "traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv"),
                            "--json"])
    assert r.exit_code == 0, r.output
    spikes = json.loads(r.output)
    assert len(spikes) > 5 and max(s["peak_rate_per_s"] for s in spikes) == pytest.approx(32.7)


def test_cli_prepare_and_bad_input(reference_dir, tmp_path):
    out = tmp_path / "p.parquet"
    r = runner.invoke(app, ["data", "prepare", "--input", str(reference_dir / BURST), "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert "383 requests (17 failed rows dropped)" in r.output
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    r = runner.invoke(app, ["data", "prepare", "--input", str(bad), "--output", str(tmp_path / "q.parquet"),
                            "--format", "azure"])
    assert r.exit_code == 2 and "missing column" in r.output
    assert not (tmp_path / "q.parquet").exists()


def test_write_pool_roundtrip_generated(tmp_path):
    from inferencegym.workload.fit import generate
    w = generate("azure_conv", 300.0, np.random.default_rng(0))
    write_pool(w, tmp_path / "g.parquet")
    r = read_pool(tmp_path / "g.parquet")
    np.testing.assert_array_equal(r.arrival_s, w.arrival_s)
    np.testing.assert_array_equal(r.prompt_tokens, w.prompt_tokens)


def test_load_trace_reads_pools_too(reference_dir, tmp_path):
    out = tmp_path / "b.parquet"
    prepare(reference_dir / BURST, out, "burstgpt", keep_failed=True)
    assert len(load_trace(out)) == 383  # failures dropped, as for CSV
    assert len(load_trace(out, keep_failed=True)) == 400
    assert len(load_trace(out, format="pool")) == 383


def test_length_sampler_of_shipped_fit():
    from inferencegym.workload import length_sampler
    p, o = length_sampler("azure_conv").sample(20000, np.random.default_rng(0))
    assert np.median(p) == pytest.approx(1020, rel=0.05) and np.median(o) == pytest.approx(129, rel=0.05)


def test_cli_generate_tenant_mix(tmp_path):
    mix = tmp_path / "mix.yaml"
    mix.write_text("tenants:\n  - {name: chat, fit: azure_conv, priority: 1, slo_ttft_s: 1.0}\n"
                   "  - {name: code, fit: azure_code, rate_scale: 2.0}\n")
    out = tmp_path / "mix.parquet"
    r = runner.invoke(app, ["data", "generate", "--tenants", str(mix), "--duration-s", "600", "--seed", "0",
                            "--output", str(out)])
    assert r.exit_code == 0, r.output
    w = read_pool(out)
    assert set(w.tenant) == {0, 1} and set(w.priority[w.tenant == 0]) == {1} and set(w.priority[w.tenant == 1]) == {0}
    assert pool_metadata(out)["source"]["fit_source"]["tenants"][1]["rate_scale"] == 2.0
    mix.write_text("tenants:\n  - {name: x, fit: azure_conv, colour: red}\n")
    r = runner.invoke(app, ["data", "generate", "--tenants", str(mix), "--output", str(tmp_path / "y.parquet")])
    assert r.exit_code == 2 and "colour" in r.output and not (tmp_path / "y.parquet").exists()


def test_prepare_sort_option(tmp_path):
    src = tmp_path / "u.csv"
    src.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "5,ChatGPT,10,5,15,API log\n9,GPT-4,11,0,11,API log\n3,ChatGPT,12,7,19,API log\n")
    out = tmp_path / "u.parquet"
    with pytest.raises(ValueError, match="non-decreasing"):
        prepare(src, out, "burstgpt")
    assert not out.exists()
    r = runner.invoke(app, ["data", "prepare", "-i", str(src), "-o", str(out), "--sort"])
    assert r.exit_code == 0, r.output
    w = read_pool(out)
    assert list(w.arrival_s) == [0.0, 2.0] and list(w.prompt_tokens) == [12, 10]
    src_meta = pool_metadata(out)["source"]
    assert src_meta["rows_in_file"] == 3 and src_meta["failed_dropped"] == 1 and src_meta["sorted"] is True
