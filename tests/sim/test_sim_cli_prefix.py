"""``inferencegym simulate``: the prefix-caching flag, its JSON keys and the cache-aware routers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from inferencegym.cli import app

runner = CliRunner()
ARGS = ["--replicas", "2", "--rate", "3", "--duration-s", "10", "--prompt-tokens", "300", "--output-tokens", "20"]


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, ["simulate", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(next(ln for ln in res.output.splitlines() if ln.strip()))


def test_prefix_caching_flag_and_keys():
    on = _json(ARGS)
    off = _json([*ARGS, "--no-prefix-caching"])
    assert on["config"]["replica"]["prefix_caching"] is True
    assert off["config"]["replica"]["prefix_caching"] is False
    for s in (on, off):
        assert s["prefix_hit_rate"] == 0.0 and s["cached_tokens"] == 0  # no block hashes: nothing shared
    for k in ("ttft_s", "tbt_s", "requests_completed", "throughput_tok_s"):
        assert on[k] == off[k]


@pytest.mark.parametrize("router", ["llmd_precise", "llmd_approx", "sglang_cache_aware", "dynamo_kv"])
def test_cache_aware_routers_run_from_the_cli(router):
    s = _json([*ARGS, "--router", router])
    assert s["requests_completed"] == s["requests_total"] > 0
