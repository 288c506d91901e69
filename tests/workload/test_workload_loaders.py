"""Loaders: BurstGPT (all column layouts), Azure 2023, replay CSV; malformed input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from inferencegym.workload import TraceFormatError, Workload, detect_format, load_trace

BURST = "burstgpt/BurstGPT_1_head400.csv"
AZ = "traces/azure_llm_2023/AzureLLMInferenceTrace_{}.csv"


@pytest.fixture(scope="module")
def ref_stats(reference_dir):
    return json.loads((reference_dir / "trace_stats.json").read_text())["traces"]


def test_burstgpt_head_drop_and_keep_failed(reference_dir):
    w = load_trace(reference_dir / BURST, format="burstgpt")
    assert len(w) == 383  # 17 failed rows (0 response tokens) dropped
    assert np.all(w.output_tokens > 0)
    # figures pinned by the data's README: medians over the non-failed rows
    assert np.median(w.prompt_tokens) == 353 and np.median(w.output_tokens) == 238
    wf = load_trace(reference_dir / BURST, format="burstgpt", keep_failed=True)
    assert len(wf) == 400 and int(wf.failed.sum()) == 17
    assert wf.arrival_s[0] == 0.0 and wf.span_s == 37269.0
    models = wf.label("model")
    assert (models == "ChatGPT").mean() == pytest.approx(0.8)
    assert (wf.label("log_type") == "Conversation log").mean() == pytest.approx(0.995)
    assert detect_format(reference_dir / BURST) == "burstgpt"


def _write_v3(src: Path, dst: Path) -> None:
    """BurstGPT v3 layout: Session ID and Elapsed time inserted at positions 2 and 3."""
    with open(src, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    out = [["Timestamp", "Session ID", "Elapsed time", *header[1:]]]
    for i, r in enumerate(rows[1:]):
        sess = str(1000 + i) if r[5] == "Conversation log" else ""
        out.append([r[0] + ".0", sess, f"{0.5 + i % 7:.2f}", *r[1:]])
    with open(dst, "w", newline="") as f:
        csv.writer(f).writerows(out)


def test_burstgpt_v3_columns_by_name(reference_dir, tmp_path):
    v3 = tmp_path / "BurstGPT_3.csv"
    _write_v3(reference_dir / BURST, v3)
    a = load_trace(reference_dir / BURST, format="burstgpt", keep_failed=True)
    b = load_trace(v3, format="burstgpt", keep_failed=True)
    for col in ("arrival_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
    np.testing.assert_array_equal(a.label("model"), b.label("model"))
    np.testing.assert_array_equal(a.label("log_type"), b.label("log_type"))


@pytest.mark.parametrize("kind", ["code", "conv"])
def test_azure_matches_reference_stats(reference_dir, ref_stats, kind):
    from inferencegym.workload.stats import trace_stats

    w = load_trace(reference_dir / AZ.format(kind), format="azure")
    ref = ref_stats[f"azure2023_{kind}"]
    s = trace_stats(w)
    assert s["n_requests"] == ref["n_requests"]
    assert s["span_s"] == pytest.approx(ref["span_s"], abs=1e-3)
    assert s["rate_mean_per_s"] == pytest.approx(ref["rate_mean_per_s"], rel=1e-3)
    assert s["iat_cv"] == pytest.approx(ref["iat_s"]["cv"], rel=1e-3)
    assert s["peak_to_mean_10s"] == pytest.approx(ref["burstiness"]["peak_to_mean_10s"], rel=1e-3)
    assert s["spike_frac_10s_2x"] == pytest.approx(ref["burstiness"]["spike_frac_10s_2x"], abs=1e-3)
    for ours, theirs in (("prompt_tokens", "prompt_tokens"), ("output_tokens", "response_tokens")):
        for q in ("p50", "p90", "p99"):
            assert s[ours][q] == pytest.approx(ref[theirs][q], rel=1e-3)


def test_replay_format_equals_azure(reference_dir):
    """Vidur's processed splitwise_conv.csv is the Azure conv trace in the replay format."""
    a = load_trace(reference_dir / AZ.format("conv"), format="azure")
    b = load_trace(reference_dir / "vidur/data/processed_traces/splitwise_conv.csv", format="replay")
    assert detect_format(reference_dir / "vidur/data/processed_traces/splitwise_conv.csv") == "replay"
    np.testing.assert_allclose(a.arrival_s, b.arrival_s, atol=1e-5)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)


def test_replay_tenant_priority_and_to_requests(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,tenant,priority\n"
                 "0.5,10,5,1,1\n1.0,0,3,0,0\n2.0,7,0,0,0\n")
    w = load_trace(p, keep_failed=True)
    assert list(w.tenant) == [1, 0, 0] and list(w.priority) == [1, 0, 0]
    reqs = w.to_requests(first_id=10)
    assert [r.req_id for r in reqs] == [10, 11]  # the failed row (0 output tokens) is skipped
    assert reqs[0].tenant == 1 and reqs[0].priority == 1 and reqs[0].arrival_s == 0.5
    assert reqs[1].prompt_tokens == 1  # 0-token prompt raised to 1 (documented)
    assert w.zero_prompt_count == 1
    with pytest.raises(ValueError, match="0 output tokens"):
        w.to_requests(include_failed=True)


# ------------------------------------------------------------------------- malformed input

def _csv(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


HDR = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def test_wrong_columns(tmp_path):
    p = _csv(tmp_path, "time,prompt,output\n1,2,3\n")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, format="burstgpt")
    msg = str(e.value)
    assert str(p) in msg and "Request tokens" in msg and "'time'" in msg
    with pytest.raises(TraceFormatError, match="cannot tell the trace format"):
        load_trace(p)
    with pytest.raises(ValueError, match="unknown trace format 'nope'; valid: azure, burstgpt, replay"):
        load_trace(p, format="nope")


def test_negative_tokens(tmp_path):
    p = _csv(tmp_path, HDR + "1,ChatGPT,10,5,15,API log\n2,ChatGPT,-3,5,2,API log\n")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, format="burstgpt")
    assert str(p) in str(e.value) and "row 2" in str(e.value) and "'Request tokens'" in str(e.value)
    assert ">= 0" in str(e.value)


def test_unsorted_timestamps_rejected_or_sorted(tmp_path):
    p = _csv(tmp_path, HDR + "5,ChatGPT,10,5,15,API log\n9,GPT-4,11,6,17,API log\n3,ChatGPT,12,7,19,API log\n")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, format="burstgpt")
    assert "row 3" in str(e.value) and "'Timestamp'" in str(e.value) and "non-decreasing" in str(e.value)
    w = load_trace(p, format="burstgpt", sort=True)
    assert list(w.arrival_s) == [0.0, 2.0, 6.0] and list(w.prompt_tokens) == [12, 10, 11]
    assert list(w.label("model")) == ["ChatGPT", "ChatGPT", "GPT-4"]


def test_non_numeric_timestamp(tmp_path):
    p = _csv(tmp_path, HDR + "1,ChatGPT,10,5,15,API log\nyesterday,ChatGPT,10,5,15,API log\n")
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, format="burstgpt")
    assert str(p) in str(e.value) and "row 2" in str(e.value) and "'Timestamp'" in str(e.value)
    assert "'yesterday'" in str(e.value)
    q = _csv(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,5,6\n"
                       "not a date,5,6\n", "az.csv")
    with pytest.raises(TraceFormatError, match=r"row 2 .*'TIMESTAMP'.*'not a date'"):
        load_trace(q, format="azure")


def test_non_integer_tokens_and_missing_cell(tmp_path):
    p = _csv(tmp_path, HDR + "1,ChatGPT,10.5,5,15,API log\n")
    with pytest.raises(TraceFormatError, match=r"row 1 .*'Request tokens'.*integer.*'10.5'"):
        load_trace(p, format="burstgpt")
    p = _csv(tmp_path, HDR + "1,ChatGPT,10,5,15,API log\n2,ChatGPT,,5,15,API log\n", "m.csv")
    with pytest.raises(TraceFormatError, match=r"row 2 .*'Request tokens'"):
        load_trace(p, format="burstgpt")


def test_empty_and_header_only(tmp_path):
    p = _csv(tmp_path, "")
    with pytest.raises(TraceFormatError, match="empty"):
        load_trace(p, format="burstgpt")
    with pytest.raises(TraceFormatError, match="empty"):
        load_trace(p)
    q = _csv(tmp_path, HDR, "h.csv")
    with pytest.raises(TraceFormatError, match="no data rows"):
        load_trace(q, format="burstgpt")
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "missing.csv", format="burstgpt")


def test_error_row_is_exact_in_a_later_block(tmp_path):
    rows = [HDR] + [f"{i},ChatGPT,10,5,15,API log\n" for i in range(5000)]
    rows[4001] = "4000,ChatGPT,10,x5,15,API log\n"
    p = _csv(tmp_path, "".join(rows))
    from inferencegym.workload.loaders import iter_trace_batches
    with pytest.raises(TraceFormatError, match=r"row 4001 \(line 4002\), column 'Response tokens'.*'x5'"):
        list(iter_trace_batches(p, "burstgpt", block_size=16 << 10))


def test_workload_ops():
    w = Workload.from_arrays([3.0, 1.0, 2.0, 10.0], [1, 2, 3, 4], [5, 6, 7, 8], tenant=[0, 1, 0, 1])
    assert list(w.arrival_s) == [1.0, 2.0, 3.0, 10.0] and list(w.prompt_tokens) == [2, 3, 1, 4]
    win = w.window(2.0, 5.0)
    assert list(win.arrival_s) == [0.0, 1.0] and list(win.prompt_tokens) == [3, 1]
    assert list(w.scale_time(2.0).arrival_s) == [2.0, 4.0, 6.0, 20.0]
    assert list(w.scale_rate(2.0).arrival_s) == [0.5, 1.0, 1.5, 5.0]
    c = w.concat(w, gap_s=1.0)
    assert len(c) == 8 and c.arrival_s[4] == 11.0 and np.all(np.diff(c.arrival_s) >= 0)
    m = Workload.merge([w.with_tenant(0), w.with_tenant(3, priority=1)])
    assert len(m) == 8 and set(m.tenant) == {0, 3} and set(m.priority[m.tenant == 3]) == {1}
    with pytest.raises(ValueError, match="output_tokens must be >= 0"):
        Workload.from_arrays([0.0], [1], [-1])
    with pytest.raises(ValueError, match="non-decreasing"):
        Workload.from_arrays([1.0, 0.0], [1, 1], [1, 1], sort=False)
    with pytest.raises(ValueError, match="positive finite"):
        w.scale_time(0)
    with pytest.raises(ValueError, match="must be finite"):
        Workload.from_arrays([float("nan")], [1], [1])


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_times = st.lists(st.floats(0, 1e4, allow_nan=False), min_size=0, max_size=60)


@settings(max_examples=60, deadline=None)
@given(_times, st.floats(0, 1e4), st.floats(0, 5e3), st.floats(0.01, 100))
def test_window_scale_merge_invariants(times, start, dur, factor):
    n = len(times)
    w = Workload.from_arrays(times, np.arange(n), np.arange(n) + 1, tenant=np.arange(n) % 3)
    assert np.all(np.diff(w.arrival_s) >= 0)
    win = w.window(start, dur)
    inside = [t for t in times if start <= t < start + dur]
    assert len(win) == len(inside)
    assert np.all((win.arrival_s >= 0) & (win.arrival_s < dur + 1e-9))
    s = w.scale_time(factor)
    np.testing.assert_allclose(s.arrival_s, w.arrival_s * factor)
    assert list(s.prompt_tokens) == list(w.prompt_tokens)
    m = Workload.merge([w, w.with_tenant(5)])
    assert len(m) == 2 * n and np.all(np.diff(m.arrival_s) >= 0)
    assert sorted(m.prompt_tokens.tolist()) == sorted(2 * w.prompt_tokens.tolist())
    # requests keep their own lengths through sorting (prompt i pairs with output i + 1)
    assert np.all(m.output_tokens == m.prompt_tokens + 1)
