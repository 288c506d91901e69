"""Published load-latency figures of vLLM (``benchmarks/vllm_published.py``) against the simulator.

Three sources, 16 load points (full table, sources and the reasons for each error in
docs/bench/fidelity.md "Published vLLM load-latency figures"):

- SGLang's reproduction of vLLM v0.6.0 (multi-step scheduling, ShareGPT, Poisson 4 and 8 req/s;
  Llama-3.1-8B on A100, Llama-3.1-70B on 4x H100): medians of TTFT, TPOT, E2E.
- Lambda's vLLM v0.5.4 result files (ShareGPT bursts of 10 / 80 / 320 prompts; Llama-3-8B on H100 and
  A100, Llama-3-70B on 4x H100): means of TTFT, TPOT, E2E, per-request lengths replayed exactly.
- DigitalOcean's vLLM 0.14.1 (V1) sweep (ShareGPT, Poisson 1 / 2 / 3 req/s; Llama-3.1-70B FP8 on one
  H200): medians of TTFT and TPOT; the same 300 ShareGPT prompts as Lambda's sample.

What is asserted: the table is well formed and transcribed consistently (latencies grow with load in
every published curve; the replayed lengths add up to the files' token totals); the simulator's
curves grow in the same direction; and the error bounds that hold for the rows in scope of what the
simulator models (TPOT of the multi-step and V1 engines, TPOT of the bursts of >= 80, E2E of every
burst), and the V1 engine's TTFT (asynchronous scheduling and its front end, issue 23). The V0 rows
replay ``vllm-v0``: synchronous steps, the API server in the engine's process (v0.5.4 admits a burst
through one Python process; its per-request time is fitted on the 8B H100 bursts) and multi-step
scheduling for v0.6.0 (a new prompt waits for the running 10-step block), issue 23.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from inferencegym.sim.presets import get_gpu, get_model


def _bench():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_published.py"
    spec = importlib.util.spec_from_file_location("vllm_published_bench", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def recs(bench):
    """Every row on ``vllm-v1`` and ``vllm-2023`` (about 1 s of CPU)."""
    out = bench.compare(["vllm-v1", "vllm-2023"], seed=0)
    return {(r["source"], r["model"], r["gpu"], r["tp"], r["rate_rps"], r["num_prompts"], r["profile"]): r
            for r in out}


def _curves(bench):
    """Rows grouped by (source, model, gpu, tp), sorted by load."""
    g = defaultdict(list)
    for row in bench.ROWS:
        g[(row.source, row.model, row.gpu, row.tp)].append(row)
    return {k: sorted(v, key=lambda r: r.load_level) for k, v in g.items()}


def _rec(recs, row, profile):
    return recs[(row.source, row.model, row.gpu, row.tp, row.rate_rps, row.num_prompts, profile)]


def test_table_is_well_formed(bench):
    assert len(bench.ROWS) == 16
    for row in bench.ROWS:
        assert row.source in bench.SOURCES
        src = bench.SOURCES[row.source]
        assert src["url"].startswith("https://") and src["stat"] in ("mean", "median")
        get_model(row.model), get_gpu(row.gpu)  # valid presets (raise otherwise)
        assert row.load in ("poisson", "burst")
        assert (row.rate_rps > 0) == (row.load == "poisson")
        assert row.tpot_ms > 0 and row.ttft_ms > 0
        if row.e2e_ms is not None:
            assert row.tpot_ms < row.e2e_ms and row.ttft_ms < row.e2e_ms
    for key, curve in _curves(bench).items():
        assert len(curve) >= 2, key
        levels = [r.load_level for r in curve]
        assert len(set(levels)) == len(levels), key
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):  # every published curve grows with load
            vals = [getattr(r, metric) for r in curve]
            if None in vals:
                assert set(vals) == {None}, (key, metric)  # a source gives a metric at all loads or none
                continue
            assert vals == sorted(vals) and vals[0] < vals[-1], (key, metric, vals)


def test_replayed_lengths_match_the_result_files(bench):
    # total_input_tokens / total_output_tokens of the Lambda result files
    totals = {"h100-10": (1369, 1867), "h100-80": (19504, 14134), "h100-320": (65578, 65331),
              "h100-70b-tp4-10": (1369, 2091), "h100-70b-tp4-80": (19504, 12868),
              "h100-70b-tp4-320": (65578, 56543), "a100-10": (1369, 1945), "a100-80": (19504, 14198),
              "a100-320": (65578, 65374)}
    bursts = [r for r in bench.ROWS if r.load == "burst"]
    assert sorted(bench.run_key(r) for r in bursts) == sorted(totals)
    first320, _ = bench.burst_lengths("h100-320")
    for row in bursts:
        ins, outs = bench.burst_lengths(bench.run_key(row))
        assert len(ins) == len(outs) == row.num_prompts
        assert (sum(ins), sum(outs)) == totals[bench.run_key(row)]
        assert ins == first320[:row.num_prompts]  # benchmark_serving's seed-0 sample is a prefix
    # DigitalOcean's 300 ShareGPT prompts are the first 300 of that sample: the report's input total
    first_out = bench.burst_lengths("h100-320")[1]
    assert sum(first320[:300]) == 62238
    assert 59105 * 0.97 < sum(first_out[:300]) < 59704 * 1.03  # stand-in outputs: report 59,105-59,704
    with pytest.raises(KeyError, match="no Lambda run 'h200-10'"):
        bench.burst_lengths("h200-10")


CURVE_SEEDS = (0, 1, 2, 3)
"""Seeds averaged per load point: one seed's median TTFT of DigitalOcean's Poisson sweep moves by
~1 ms between seeds (seeds 0-5 at 3 req/s: 67.4-70.0 ms), as much as the step from 2 to 3 req/s
(~1.1 ms of the 4-seed means); single seeds tie it before and after the sampler refit (seed 4
before: 66.64 / 66.72; seed 1 after: 67.31 / 67.48) and an intermediate refit inverted seed 0
(68.05 / 67.64; docs/bench/fidelity.md, seventh session)."""


def test_simulated_curves_grow_with_load_like_the_published_ones(bench):
    for key, curve in _curves(bench).items():
        runs = [[bench.simulate(r, "vllm-v1", s) for s in CURVE_SEEDS] for r in curve]
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            if getattr(curve[0], metric) is None:
                continue
            sim = [sum(x[metric] for x in point) / len(point) for point in runs]
            assert all(a < b for a, b in itertools.pairwise(sim)), (key, metric, sim)


def test_vllm_v1_error_bounds_on_the_rows_in_scope(bench, recs):
    for row in bench.ROWS:
        r = _rec(recs, row, "vllm-v1")
        if row.source == "sglang-vllm060":
            # vLLM 0.6 with multi-step scheduling (10-step blocks; `vllm-v0`'s per-step figure)
            assert abs(r["tpot_ms_err_pct"]) <= 10.0, r
            # the wait for the running block is simulated: TP1 within 20 %; TP4 30-35 % short
            # (docs/bench/fidelity.md, "Issue 23: vLLM V0 mechanisms")
            assert abs(r["ttft_ms_err_pct"]) <= (20.0 if row.tp == 1 else 40.0), r
        elif row.source == "do-vllm0141":
            # vLLM V1 on H200 (the engine `vllm-v1` stands for), FP8 weights as the int8 tier:
            # +8..+10% over seeds 0-4
            assert abs(r["tpot_ms_err_pct"]) <= 12.0, r
            # asynchronous scheduling (first token at step k+2) and the API server (front end)
            assert abs(r["ttft_ms_err_pct"]) <= 20.0, r
        else:
            assert abs(r["e2e_ms_err_pct"]) <= 20.0, r  # every burst, exact per-request lengths
            if row.num_prompts >= 80:
                assert abs(r["tpot_ms_err_pct"]) <= 16.0, r
            # the in-process API server of v0.5.4 admits the burst (fitted on the 8B H100 bursts)
            fit = (row.model, row.gpu) == ("llama-3-8b", "h100-80gb")
            assert abs(r["ttft_ms_err_pct"]) <= (12.0 if fit else 25.0), r


def test_issue_23_goal_published_load_points(bench, recs):
    """TTFT within 20 % on at least 12 of the 16 points, TPOT within 15 % on at least 14."""
    errs = [_rec(recs, row, "vllm-v1") for row in bench.ROWS]
    assert sum(abs(r["ttft_ms_err_pct"]) <= 20.0 for r in errs) >= 12
    assert sum(abs(r["tpot_ms_err_pct"]) <= 15.0 for r in errs) >= 14


def test_vllm_v1_is_closer_than_the_2023_engine_where_batches_are_large(bench, recs):
    for row in bench.ROWS:
        if row.load == "burst" and row.num_prompts < 80:
            continue  # batch of <= 10: v0.5.4's per-step CPU cost, nearer the 2023 engine's
        v1, old = _rec(recs, row, "vllm-v1"), _rec(recs, row, "vllm-2023")
        assert abs(v1["tpot_ms_err_pct"]) < abs(old["tpot_ms_err_pct"]), (row, v1, old)
        assert old["tpot_ms_err_pct"] > 30.0  # the 2023 per-sequence cost over-predicts decode
