"""``inferencegym simulate``: stable flags, one JSON object, YAML config, tenants, trace replay, errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from inferencegym.cli import app

runner = CliRunner()

KEYS = {"requests_completed", "requests_rejected", "preemptions", "throughput_tok_s", "ttft_s", "tbt_s",
        "e2e_s", "kv_occupancy_mean", "wall_s", "quality_delta", "cost_per_1k_tokens", "spec_acceptance_rate",
        "tenants"}


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, ["simulate", *args, "--json"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output  # exactly one JSON object
    return json.loads(lines[0])


def test_json_has_the_stable_keys_and_is_seeded():
    args = ["--model", "llama-2-7b", "--gpu", "a100-80gb", "--tensor-parallel", "1", "--replicas", "2",
            "--router", "round_robin", "--scheduler", "sarathi", "--batch-cap", "64", "--chunk-size", "256",
            "--kv-budget-fraction", "0.5", "--rate", "3", "--duration-s", "20", "--prompt-tokens", "300",
            "--output-tokens", "50", "--seed", "4"]
    a = _json(args)
    assert KEYS <= set(a)
    for k in ("ttft_s", "tbt_s", "e2e_s"):
        assert set(a[k]) == {"p50", "p90", "p99"} and a[k]["p50"] <= a[k]["p99"]
    assert a["requests_completed"] > 30 and a["requests_rejected"] == 0
    assert a["spec_acceptance_rate"] is None  # speculation off -> null, not NaN
    b = _json(args)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    c = _json(args[:-1] + ["5"])
    assert c["requests_completed"] != a["requests_completed"] or c["ttft_s"] != a["ttft_s"]


def test_issue4_flags_and_tenants(tmp_path):
    ten = tmp_path / "tenants.yaml"
    ten.write_text("- {name: chat, priority: 1, ttft_slo_s: 0.5, tbt_slo_s: 0.05, spec_acceptance: 0.8, share: 1}\n"
                   "- {name: batch, priority: 0, ttft_slo_s: 5.0, tbt_slo_s: 0.2, share: 2}\n")
    out = _json(["--replicas", "3", "--disaggregate", "--prefill-replicas", "1", "--priority-routing",
                 "--tenants", str(ten), "--speculation-depth", "2", "--spec-acceptance", "0.6",
                 "--quantization", "int8", "--rate", "4", "--duration-s", "20"])
    assert set(out["tenants"]) == {"chat", "batch"}
    for t in out["tenants"].values():
        assert set(t["ttft_s"]) == {"p50", "p90", "p99"} and set(t["tbt_s"]) == {"p50", "p90", "p99"}
    assert 0.0 < out["spec_acceptance_rate"] < 1.0
    assert out["quality_delta"] > 0.0  # int8 costs quality
    assert out["cost_per_1k_tokens"] > 0.0
    assert out["config"]["disaggregate"] is True and out["gpus"] == 3


def test_config_yaml_and_flag_override(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("rate: 2.0\nduration_s: 10\nprompt_tokens: 100\noutput_tokens: 10\nscheduler: static\n")
    a = _json(["--config", str(cfg)])
    assert a["config"]["replica"]["scheduler"] == "static"
    b = _json(["--config", str(cfg), "--scheduler", "vllm"])
    assert b["config"]["replica"]["scheduler"] == "vllm"
    bad = tmp_path / "bad.yaml"
    bad.write_text("rat: 2\n")
    res = runner.invoke(app, ["simulate", "--config", str(bad), "--json"])
    assert res.exit_code != 0 and "unknown option" in res.output


def test_trace_replay_and_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    tr = tmp_path / "t.csv"
    tr.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,20\n0.5,2000,5\n1.0,30,40\n")
    out_pq = tmp_path / "r.parquet"
    out = _json(["--trace", str(tr), "--results-parquet", str(out_pq)])
    assert out["requests_completed"] == 3
    assert pq.read_table(out_pq).num_rows == 3


def test_bad_values_give_clear_errors():
    res = runner.invoke(app, ["simulate", "--router", "nope", "--json"])
    assert res.exit_code != 0 and "unknown router 'nope'" in res.output
    res = runner.invoke(app, ["simulate", "--quantization", "int3", "--json"])
    assert res.exit_code != 0 and "unknown quantization" in res.output
    res = runner.invoke(app, ["simulate", "--disaggregate", "--replicas", "1", "--json"])
    assert res.exit_code != 0 and "disaggregation needs" in res.output


def test_table_output():
    res = runner.invoke(app, ["simulate", "--rate", "2", "--duration-s", "5"])
    assert res.exit_code == 0, res.output
    assert "ttft_s p50/p90/p99" in res.output and "requests_completed" in res.output


def test_replica_knob_defaults_are_the_one_vocabulary():
    """Without flags, ``simulate`` runs ``DEFAULT_KNOBS`` (vLLM's max_num_seqs 256, KV 0.9), the
    defaults every task, action and ``ReplicaConfig()`` start from (it had its own 128 / 1.0)."""
    from inferencegym.sim.config import DEFAULT_KNOBS

    cfg = _json(["--rate", "1", "--duration-s", "5", "--output-tokens", "8"])["config"]["replica"]
    assert cfg["batch_cap"] == DEFAULT_KNOBS.batch_cap == 256
    assert cfg["kv_budget_fraction"] == DEFAULT_KNOBS.kv_budget_fraction == 0.9
    assert cfg["scheduler"] == DEFAULT_KNOBS.scheduler and cfg["quantization"] == DEFAULT_KNOBS.quantization


def test_the_proposer_and_a_published_acceptance_by_workload():
    from inferencegym.sim.spec_acceptance import acceptance_alpha

    base = ["--model", "llama-3-8b", "--gpu", "h100-80gb", "--rate", "2", "--duration-s", "20",
            "--speculation-depth", "4"]
    ngram = _json([*base, "--draft-model", "ngram", "--spec-workload", "cnn_dailymail"])
    rep = ngram["config"]["replica"]
    assert rep["draft_model"] == "ngram"
    assert rep["spec_acceptance"] == pytest.approx(acceptance_alpha("ngram", "cnn_dailymail"))
    assert rep["spec_acceptance"] != pytest.approx(0.7)
    assert _json(base)["config"]["replica"]["spec_acceptance"] == pytest.approx(0.7)
    both = runner.invoke(app, ["simulate", *base, "--spec-workload", "sharegpt", "--spec-acceptance", "0.5"])
    assert both.exit_code != 0 and "not both" in both.output
    unknown = runner.invoke(app, ["simulate", *base, "--spec-workload", "nope"])
    assert unknown.exit_code != 0 and "no published acceptance" in unknown.output
