"""benchmarks/gpt_oss_bursts.py `frontend_rows`: the shape test of the API-server hypothesis for the
two-GPU bursts' TTFT offset. A single FIFO front end of s per request (requests reach the engine at
(i + 1) s, TTFT counted from the burst's send) moves nothing while s is under the engine's prefill
time per request, and once above it stretches the spread p99 - mean instead of shifting the whole
distribution (docs/bench/models_memory.md, "The TTFT offset: the API-server hypothesis tested")."""

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def tp2():
    sys.path.insert(0, str(BENCH))
    try:
        g = importlib.import_module("gpt_oss_bursts")
        yield {gap: g.simulate("TP2 async", send_gap_s=gap) for gap in (0.0, 2e-3, 9e-3)}
    finally:
        sys.path.remove(str(BENCH))


def test_a_front_end_faster_than_the_engines_prefill_moves_nothing(tp2):
    base, fast = tp2[0.0], tp2[2e-3]
    assert fast["ttft_s"] == pytest.approx(base["ttft_s"], rel=0.02)
    assert fast["ttft_p99_s"] == pytest.approx(base["ttft_p99_s"], rel=0.02)
    assert fast["tpot_ms"] == pytest.approx(base["tpot_ms"], rel=0.03)


def test_a_slower_front_end_stretches_the_spread_instead_of_shifting_it(tp2):
    base, slow = tp2[0.0], tp2[9e-3]
    assert slow["ttft_s"] > base["ttft_s"] + 1.0  # TTFT counted from the send: 1,000 x 9 ms to get in
    spread0, spread9 = base["ttft_p99_s"] - base["ttft_s"], slow["ttft_p99_s"] - slow["ttft_s"]
    assert spread9 > 1.3 * spread0  # the published spread (2.97 s) is within 6 % of spread0


def test_a_first_token_floor_raises_the_early_requests_only():
    sys.path.insert(0, str(BENCH))
    try:
        mm = importlib.import_module("models_memory")
        kw = dict(sync=False, prompt_extra=mm.HARMONY_PROMPT_TOKENS)
        base = mm._burst("gpt-oss-120b", "h100-80gb", "mxfp4", 2, 1000, 128, 4, 8192, **kw)
        held = mm._burst("gpt-oss-120b", "h100-80gb", "mxfp4", 2, 1000, 128, 4, 8192, ttft_floor_s=2.5, **kw)
    finally:
        sys.path.remove(str(BENCH))
    assert held["ttft_p50_s"] >= 2.5 - 1e-9 and held["ttft_s"] > base["ttft_s"] + 0.3
    assert held["ttft_p99_s"] == pytest.approx(base["ttft_p99_s"], rel=1e-9)  # the tail is past the floor
