"""Mooncake / Bailian JSONL loaders, hash-chain pools, prefix statistics (hand-built and the shared trace)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferencegym.workload import load_trace, read_pool, write_pool
from inferencegym.workload.pool import prepare
from inferencegym.workload.prefix_stats import prefix_stats, zipf_exponent

MOONCAKE = "traces/mooncake/synthetic_trace.jsonl"


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _mc(t, n_in, n_out, ids):
    return {"timestamp": t, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


def test_mooncake_rows_load_with_chains_in_seconds(tmp_path):
    p = _jsonl(tmp_path / "m.jsonl", [_mc(1000, 600, 5, [0, 1]), _mc(1500, 1024, 7, [0, 2]),
                                      _mc(4000, 100, 0, [3])])
    w = load_trace(p, format="mooncake")
    assert len(w) == 2  # the 0-output row is a failed request, dropped as for the CSV traces
    np.testing.assert_allclose(w.arrival_s, [0.0, 0.5])
    assert w.hash_block_tokens == 512 and [h.tolist() for h in w.hash_ids] == [[0, 1], [0, 2]]
    r = w.to_requests()
    assert len(r[0].block_hashes) == 37 and len(r[1].block_hashes) == 64
    assert r[0].block_hashes[:32] == r[1].block_hashes[:32] and r[0].block_hashes[32] != r[1].block_hashes[32]
    assert len(load_trace(p, format="mooncake", keep_failed=True)) == 3
    assert load_trace(p).hash_block_tokens == 512  # auto: by suffix and fields
    # the trace's block size is a parameter
    w16 = load_trace(p, format="mooncake", trace_block_tokens=300)
    assert w16.hash_block_tokens == 300


def test_bailian_rows_keep_sessions_turns_and_type(tmp_path):
    rows = [{"chat_id": 5, "parent_chat_id": -1, "timestamp": 10.5, "input_length": 40, "output_length": 3,
             "type": "text", "turn": 1, "hash_ids": [11, 12, 13]},
            {"chat_id": 6, "parent_chat_id": 5, "timestamp": 12.0, "input_length": 70, "output_length": 4,
             "type": "text", "turn": 2, "hash_ids": [11, 12, 13, 14, 15]},
            {"chat_id": 7, "parent_chat_id": -1, "timestamp": 12.0, "input_length": 16, "output_length": 2,
             "type": "image", "turn": 1, "hash_ids": [99]}]
    w = load_trace(_jsonl(tmp_path / "b.jsonl", rows), format="bailian")
    assert w.hash_block_tokens == 16
    np.testing.assert_allclose(w.arrival_s, [0.0, 1.5, 1.5])
    assert w.ints["chat"].tolist() == [5, 6, 7] and w.ints["parent"].tolist() == [-1, 5, -1]
    assert w.ints["turn"].tolist() == [1, 2, 1] and w.label("type").tolist() == ["text", "text", "image"]
    r = w.to_requests()
    assert [len(x.block_hashes) for x in r] == [2, 4, 1] and r[1].block_hashes[:2] == r[0].block_hashes
    t = prefix_stats(w)["turns"]
    assert t["mean_turns_labelled"] == pytest.approx(1.5) and t["mean_turns"] == pytest.approx(1.5)


@pytest.mark.parametrize("bad,where,expected", [
    ({"hash_ids": [0, 1.5]}, "field 'hash_ids'", "list of integer block ids"),
    ({"hash_ids": [0, -4]}, "field 'hash_ids'", "block ids >= 0, got -4"),
    ({"hash_ids": "0,1"}, "field 'hash_ids'", "list of integer block ids"),
    ({"hash_ids": 7}, "field 'hash_ids'", "list of integer block ids"),
    ({"hash_ids": [0, 1, 2, 3]}, "field 'hash_ids'", "at most ceil\\(600/512\\) = 2 ids"),
    ({"input_length": 12.5}, "field 'input_length'", "expected an integer"),
    ({"input_length": -3}, "field 'input_length'", "token count >= 0"),
    ({"timestamp": "noon"}, "field 'timestamp'", "a finite number"),
    ({"hash_ids": None}, "field 'hash_ids'", "missing value"),
])
def test_malformed_rows_name_file_row_line_field_and_expected(tmp_path, bad, where, expected):
    good = _mc(0, 600, 5, [0, 1])
    p = _jsonl(tmp_path / "bad.jsonl", [good, "", {**good, "timestamp": 5}, {**good, "timestamp": 9, **bad}])
    with pytest.raises(ValueError) as info:
        load_trace(p, format="mooncake")
    msg = str(info.value)
    assert "bad.jsonl" in msg and "row 3 (line 4)" in msg and where in msg, msg
    assert __import__("re").search(expected, msg), msg


def test_unsorted_missing_fields_and_spread(tmp_path):
    p = _jsonl(tmp_path / "u.jsonl", [_mc(3000, 10, 1, [0]), _mc(0, 10, 1, [1])])
    with pytest.raises(ValueError, match="row 2 .*non-decreasing"):
        load_trace(p, format="mooncake")
    assert load_trace(p, format="mooncake", sort=True).hash_ids[0].tolist() == [1]
    q = _jsonl(tmp_path / "q.jsonl", [{"timestamp": 0, "input_length": 5}])
    with pytest.raises(ValueError, match=r"missing field\(s\) \['output_length', 'hash_ids'\]"):
        load_trace(q, format="mooncake")
    # the 3-s clock: every tick's requests spread over it, seeded
    ticks = _jsonl(tmp_path / "c.jsonl", [_mc(t, 20, 2, [i]) for i, t in enumerate([0] * 50 + [3000] * 50)])
    a = load_trace(ticks, spread_tick_s=3.0, seed=1)
    b = load_trace(ticks, spread_tick_s=3.0, seed=1)
    c = load_trace(ticks, spread_tick_s=3.0, seed=2)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert np.all(np.diff(a.arrival_s) >= 0) and a.arrival_s.min() >= 0 and a.arrival_s.max() < 6.0
    first_tick = a.arrival_s[[h[0] < 50 for h in a.hash_ids]]
    assert first_tick.max() < 3.0 and np.std(first_tick) > 0.5  # spread over the tick, not stacked
    assert np.all(load_trace(ticks).arrival_s[:50] == 0.0)      # off by default


def test_pools_keep_chains_and_old_pools_still_read(tmp_path):
    rows = [_mc(0, 600, 5, [0, 1]), _mc(2000, 1100, 7, [0, 1, 9])]
    src = _jsonl(tmp_path / "m.jsonl", rows)
    meta = prepare(src, tmp_path / "m.parquet", "mooncake")
    assert meta["hash_block_tokens"] == 512
    w = read_pool(tmp_path / "m.parquet")
    assert [h.tolist() for h in w.hash_ids] == [[0, 1], [0, 1, 9]] and w.hash_block_tokens == 512
    assert w.to_requests()[1].block_hashes[:37] == load_trace(src).to_requests()[0].block_hashes
    old = tmp_path / "old.parquet"
    write_pool(load_trace(src).__class__.from_arrays([0.0, 1.0], [10, 20], [1, 2]), old)
    import pyarrow.parquet as pq
    assert "hash_ids" not in pq.read_schema(str(old)).names
    assert read_pool(old).hash_ids is None and read_pool(old).to_requests()[0].block_hashes == ()


def test_prefix_stats_on_a_hand_built_trace_with_known_answers(tmp_path):
    from inferencegym.workload import Workload

    w = Workload.from_arrays([0.0, 1.0, 3.0, 4.0], [32, 48, 16, 32], [1, 1, 1, 1],
                             hash_ids=[[1, 2], [1, 2, 3], [4], [1, 5]], hash_block_tokens=16)
    s = prefix_stats(w, block_tokens=16)
    assert s["hit_bound"] == pytest.approx(48 / 128)        # r1 reuses 2 blocks, r3 one
    assert s["distinct_blocks"] == 5
    assert s["reuse"]["seconds"]["p50"] == pytest.approx(1.0) and s["reuse"]["seconds"]["mean"] == pytest.approx(5 / 3)
    assert s["reuse"]["requests"]["mean"] == pytest.approx(4 / 3)
    p = s["popularity"]
    assert p["distinct_prefixes"] == 2 and p["top1_share"] == pytest.approx(0.75)
    assert p["shared_request_share"] == pytest.approx(0.75)
    assert s["turns"]["sessions"] == 3 and s["turns"]["mean_turns"] == pytest.approx(4 / 3)
    # coarser simulator blocks: only full 32-token blocks count
    s32 = prefix_stats(w, block_tokens=32)
    assert s32["hit_bound"] == pytest.approx(32 / 128)


def test_zipf_exponent_recovers_a_known_law():
    rng = np.random.default_rng(0)
    K, s = 300, 1.1
    p = np.arange(1, K + 1) ** -s
    counts = rng.multinomial(200_000, p / p.sum())
    assert zipf_exponent(counts) == pytest.approx(s, abs=0.03)
    flat = rng.multinomial(200_000, np.full(K, 1 / K))
    assert zipf_exponent(flat) < 0.05


def test_shared_mooncake_trace_loads_and_matches_its_readme(reference_dir):
    w = load_trace(reference_dir / MOONCAKE, format="mooncake")
    assert len(w) == 3993 and w.span_s == pytest.approx(1022.025)
    assert w.prompt_tokens.mean() == pytest.approx(15325, abs=1) and w.output_tokens.mean() == pytest.approx(149, abs=1)
    assert np.unique(np.concatenate(list(w.hash_ids))).size == 43924
    s = prefix_stats(w)
    assert s["hit_bound"] == pytest.approx(0.651, abs=0.001)  # README: 65.1 %
    assert s["turns"]["sessions"] < len(w)


def test_cli_prepare_compare_with_trace_format(reference_dir, tmp_path):
    from typer.testing import CliRunner

    from inferencegym.cli import app

    src = reference_dir / MOONCAKE
    out = tmp_path / "mc.parquet"
    r = CliRunner().invoke(app, ["data", "prepare", "--input", str(src), "--output", str(out),
                                 "--trace-format", "mooncake"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["data", "compare", str(src), str(out), "--trace-format", "mooncake", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["prefix"]["a"]["hit_bound"] == pytest.approx(rep["prefix"]["b"]["hit_bound"])
    bad = _jsonl(tmp_path / "bad.jsonl", [_mc(0, 10, 1, [0, 1])])
    r = CliRunner().invoke(app, ["data", "prepare", "--input", str(bad), "--output", str(tmp_path / "x.parquet"),
                                 "--trace-format", "mooncake"])
    assert r.exit_code == 2 and "row 1 (line 1), field 'hash_ids'" in r.output


def test_simulate_cli_reads_a_mooncake_trace(tmp_path):
    from typer.testing import CliRunner

    from inferencegym.cli import app

    rows = [_mc(i * 200, 1200 + 10 * i, 4, [0, 1, 100 + i]) for i in range(20)]
    p = _jsonl(tmp_path / "t.jsonl", rows)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(p), "--trace-format", "mooncake", "--replicas", "2",
                                 "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["requests_completed"] == 20
