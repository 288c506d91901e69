"""Real-endpoint replay against a streaming OpenAI-compatible fake with known delays (127.0.0.1)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from fakes.openai_server import FakeOpenAIServer
from inferencegym.apps.replay import ReplayConfig, SimTarget, compare, prepare_workload, run_replay, simulate

TTFT_S, ITL_S = 0.15, 0.02


def _cli(*args: str):
    """The real ``inferencegym`` CLI, in process (stdout and stderr kept apart)."""
    from typer.testing import CliRunner

    from inferencegym.cli import app

    return CliRunner().invoke(app, list(args))


def test_replay_records_the_servers_ttft_and_inter_token_times():
    n, out_tokens = 10, 8
    arrival = np.arange(n) * 0.15
    with FakeOpenAIServer(ttft_s=TTFT_S, itl_s=ITL_S) as srv:
        cfg = ReplayConfig(endpoint=srv.base_url, model="fake-model", concurrency=n)
        res = run_replay(arrival, np.full(n, 200), np.full(n, out_tokens), cfg)
        server_t = np.array([r["t"] for r in srv.requests[1:]])  # [0] is the untimed warm-up
    rec = res.records
    assert len(res) == n and not rec["rejected"].any()
    assert (rec["generated_tokens"] == out_tokens).all() and (rec["chunks"] == out_tokens).all()
    ttft = rec["ttft_s"]
    # never faster than the server's delay (a hard bound), and close to it: client + loopback overhead
    # only, with headroom for scheduler delays on a loaded 2-core machine (the suite runs there)
    assert (ttft >= TTFT_S - 0.005).all(), ttft
    assert np.median(ttft) < TTFT_S + 0.5, ttft
    assert ITL_S - 0.005 < np.median(rec["tpot_s"]) < ITL_S + 0.1, rec["tpot_s"]
    assert ITL_S - 0.005 < np.median(res.itl_s) < ITL_S + 0.1
    assert res.itl_s.size == n * (out_tokens - 1)
    # e2e = ttft + (tokens - 1) gaps
    assert np.allclose(rec["e2e_s"], ttft + rec["tbt_sum_s"])
    # paced by the arrival times (server-side gaps ~0.15 s, not a burst)
    assert 0.15 - 0.03 < np.median(np.diff(server_t)) < 0.15 + 0.25
    assert server_t[-1] - server_t[0] > 0.8 * arrival[-1]


def test_concurrency_and_count_are_bounded():
    with FakeOpenAIServer(ttft_s=0.1, itl_s=0.01) as srv:
        cfg = ReplayConfig(endpoint=srv.base_url, model="m", concurrency=2, max_requests=6)
        res = run_replay(np.zeros(40), np.full(40, 50), np.full(40, 5), cfg)
        assert len(srv.requests) == 1 + 6  # warm-up + the bounded count
        assert srv.max_active <= 2
    # six simultaneous arrivals through two slots: the later ones waited on the client
    wait = np.sort(res.records["client_wait_s"])
    assert wait[-1] > 0.1 and wait[0] < 0.5 * wait[-1]  # (no absolute bound: the machine may be busy)


def test_server_errors_are_recorded_and_warmup_fails_fast():
    with FakeOpenAIServer(fail_status=500) as srv:
        with pytest.raises(ConnectionError, match="warm-up request"):
            run_replay(np.zeros(3), np.full(3, 10), np.full(3, 4),
                       ReplayConfig(endpoint=srv.base_url, model="m"))
        res = run_replay(np.zeros(3), np.full(3, 10), np.full(3, 4),
                         ReplayConfig(endpoint=srv.base_url, model="m", warmup=False))
    assert res.records["rejected"].all()
    assert all("500" in r or "InternalServerError" in r for r in res.records["rejected_reason"])


@pytest.mark.parametrize("kw,match", [
    ({"endpoint": "127.0.0.1:8000"}, "http"),
    ({"concurrency": 0}, "concurrency"),
    ({"time_scale": 0.0}, "time_scale"),
    ({"api": "grpc"}, "api"),
])
def test_bad_config_is_refused(kw, match):
    args = {"endpoint": "http://127.0.0.1:1/v1", "model": "m", **kw}
    with pytest.raises(ValueError, match=match):
        ReplayConfig(**args)


def test_records_use_the_simulator_schema_and_compare(tmp_path):
    with FakeOpenAIServer(ttft_s=0.05, itl_s=0.01) as srv:
        cfg = ReplayConfig(endpoint=srv.base_url, model="m", max_output_tokens=6, api="completions")
        a, p, o, clipped = prepare_workload(np.arange(5) * 0.05, np.full(5, 64), np.full(5, 50), cfg)
        assert clipped["outputs"] == 5 and (o == 6).all()  # stated clip, counted
        res = run_replay(a, p, o, cfg)
    path = tmp_path / "real.parquet"
    res.write_parquet(str(path))
    cols = set(pq.read_table(path).column_names)
    sim = simulate(a, p, o, SimTarget())
    assert {"req_id", "arrival_s", "first_token_s", "completion_s", "tbt_max_s", "tbt_sum_s",
            "generated_tokens", "ttft_s", "tpot_s", "e2e_s", "rejected_reason"} <= cols & set(sim)
    report = compare(res.records, sim, res.itl_s)
    assert report["requests"] == 5 and report["failed"] == 0
    row = report["metrics"]["ttft_s"]
    assert row["real"]["p50"] > 0 and row["sim"]["p50"] > 0
    assert row["ratio_p50"] == pytest.approx(row["real"]["p50"] / row["sim"]["p50"])
    assert 0 <= row["ks_stat"] <= 1


def test_cli_replay_of_a_task_against_the_fake(tmp_path):
    out = tmp_path / "rec.parquet"
    with FakeOpenAIServer(ttft_s=0.05, itl_s=0.005) as srv:
        r = _cli("replay", "--endpoint", srv.base_url, "--model", "m", "--task", "static_workload",
                 "--max-requests", "12", "--time-scale", "0.25", "--max-output-tokens", "16",
                 "--output", str(out), "--json")
    assert r.exit_code == 0, r.output[-3000:]
    report = json.loads(r.stdout)
    assert report["requests"] == 12 and report["failed"] == 0
    assert report["sim_target"]["model"] == "llama-2-7b"
    assert set(report["metrics"]) == {"ttft_s", "tpot_s", "tbt_max_s", "e2e_s"}
    assert report["metrics"]["ttft_s"]["real"]["p50"] >= 0.05 - 0.005
    assert pq.read_table(out).num_rows == 12


def test_cli_replay_needs_exactly_one_workload():
    r = _cli("replay", "--endpoint", "http://127.0.0.1:1/v1", "--model", "m")
    assert r.exit_code != 0 and "--trace PATH or --task ID" in r.output


def test_cli_replay_of_a_trace_file(tmp_path):
    """--trace goes through inferencegym.workload's loaders (here the simulator's replay CSV)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                     + "".join(f"{0.05 * i:.3f},{100 + i},{4 + i % 3}\n" for i in range(8)))
    with FakeOpenAIServer(ttft_s=0.03, itl_s=0.005) as srv:
        r = _cli("replay", "--endpoint", srv.base_url, "--model", "m", "--trace", str(trace), "--json")
        bodies = [q["body"] for q in srv.requests[1:]]
    assert r.exit_code == 0, r.output[-3000:]
    report = json.loads(r.stdout)
    assert report["requests"] == 8 and report["failed"] == 0 and report["source"] == str(trace)
    assert sorted(b["max_tokens"] for b in bodies) == sorted(4 + i % 3 for i in range(8))
