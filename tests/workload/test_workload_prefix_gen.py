"""Prefix-sharing generators: determinism, session semantics, popularity, tenants, shipped Mooncake fits."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from inferencegym.workload.prefix_fit import fast_hit_bound, fit_prefix_specs
from inferencegym.workload.prefix_gen import (LEVELS, PREFIX_FITS, PrefixWorkloadSpec, default_prefix_spec,
                                              generate_prefix_mix, generate_prefix_workload)
from inferencegym.workload.prefix_loaders import load_prefix_trace
from inferencegym.workload.prefix_stats import prefix_stats, zipf_exponent


def c(v: float) -> tuple[float, ...]:
    return tuple(float(v) for _ in LEVELS)


def spec(**kw) -> PrefixWorkloadSpec:
    base = dict(kind="multiturn", session_rate_per_s=2.0, num_prefixes=0, zipf_s=0.0, unique_share=1.0,
                prefix_tokens=c(0), first_message_tokens=c(40), unique_prompt_tokens=c(100),
                turn_message_tokens=c(30), output_tokens=c(20), turns=c(3), think_time_s=c(5.0))
    return PrefixWorkloadSpec(**{**base, **kw})


def test_same_seed_same_workload_other_seed_differs():
    s = default_prefix_spec("mooncake_shared_prefix")
    a = generate_prefix_workload(s, 200.0, np.random.default_rng(3))
    b = generate_prefix_workload(s, 200.0, np.random.default_rng(3))
    d = generate_prefix_workload(s, 200.0, np.random.default_rng(4))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    assert all(np.array_equal(x, y) for x, y in zip(a.hash_ids, b.hash_ids))
    assert [r.block_hashes for r in a.to_requests()] == [r.block_hashes for r in b.to_requests()]
    assert not np.array_equal(a.arrival_s[:10], d.arrival_s[:10])


def test_multiturn_prompt_is_previous_context_plus_message():
    w = generate_prefix_workload(spec(), 1000.0, np.random.default_rng(0))
    sess, turn = w.ints["session"], w.ints["turn"]
    s0 = np.flatnonzero(sess == sess[0])
    assert turn[s0].tolist() == [1, 2, 3]
    assert w.prompt_tokens[s0].tolist() == [100, 100 + 20 + 30, 150 + 20 + 30]
    np.testing.assert_allclose(np.diff(w.arrival_s[s0]), [5.0, 5.0])
    h = [w.hash_ids[i] for i in s0]
    assert np.array_equal(h[1][:100 // 16], h[0][:100 // 16]) and np.array_equal(h[2][:150 // 16], h[1][:150 // 16])
    assert h[1][100 // 16] != h[0][100 // 16]  # the partial block changed content: a fresh id
    reqs = w.to_requests()
    assert reqs[s0[1]].block_hashes[:6] == reqs[s0[0]].block_hashes
    # without the output in the context
    w2 = generate_prefix_workload(spec(context_includes_output=False), 1000.0, np.random.default_rng(0))
    s1 = np.flatnonzero(w2.ints["session"] == w2.ints["session"][0])
    assert w2.prompt_tokens[s1].tolist() == [100, 130, 160]
    # sessions of different sessions never share a block (no prefixes in this spec)
    other = np.flatnonzero(sess != sess[0])[0]
    assert not set(w.hash_ids[other].tolist()) & set(h[0].tolist())


def test_shared_prefixes_follow_their_zipf_popularity_and_share_blocks():
    s = spec(kind="shared_prefix", num_prefixes=40, zipf_s=1.2, unique_share=0.0, prefix_tokens=c(320),
             turns=c(1), session_rate_per_s=50.0)
    w = generate_prefix_workload(s, 400.0, np.random.default_rng(1))
    first = np.array([h[0] for h in w.hash_ids])
    _, counts = np.unique(first, return_counts=True)
    assert counts.size == 40 and zipf_exponent(counts) == pytest.approx(1.2, abs=0.08)
    assert np.all(w.prompt_tokens == 360)
    # every request after its prefix's first use reuses the prefix's 20 full blocks (320 tokens)
    expected = (len(w) - 40) * 320 / w.prompt_tokens.sum()
    assert fast_hit_bound(w) == pytest.approx(expected)
    assert prefix_stats(w)["hit_bound"] == pytest.approx(expected)


def test_tenants_get_their_own_prefixes_and_do_not_collide():
    a = spec(kind="shared_prefix", num_prefixes=3, unique_share=0.0, prefix_tokens=c(160), turns=c(1))
    w = generate_prefix_mix([a, a], 300.0, np.random.default_rng(0))
    assert set(w.tenant.tolist()) == {0, 1}
    ids = [set(np.concatenate([h for h, t in zip(w.hash_ids, w.tenant) if t == k]).tolist()) for k in (0, 1)]
    assert not ids[0] & ids[1]
    again = generate_prefix_mix([a, a], 300.0, np.random.default_rng(0))
    np.testing.assert_array_equal(w.arrival_s, again.arrival_s)


@pytest.mark.parametrize("kw,match", [
    ({"session_rate_per_s": 0.0}, "session_rate_per_s"),
    ({"turns": (3.0, 1.0) + c(1)[2:]}, "non-decreasing"),
    ({"unique_share": 0.5}, "num_prefixes=0"),
    ({"output_tokens": (1.0, 2.0)}, "quantiles"),
])
def test_bad_specs_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        spec(**kw)


def test_spec_round_trips_through_json(tmp_path):
    s = default_prefix_spec("mooncake_agent")
    s.save(tmp_path / "a.json")
    assert PrefixWorkloadSpec.load(tmp_path / "a.json") == s
    d = json.loads((tmp_path / "a.json").read_text())
    with pytest.raises(ValueError, match="schema"):
        PrefixWorkloadSpec.from_dict({**d, "schema": "other"})
    assert replace(s, session_rate_per_s=1.0).with_rate(4.0).session_rate_per_s == pytest.approx(4.0 / s.mean_turns())


def test_shipped_fits_equal_a_fresh_fit_and_match_the_trace(reference_dir):
    w = load_prefix_trace(reference_dir / "traces/mooncake/synthetic_trace.jsonl", "mooncake")
    fresh = fit_prefix_specs(w, source="synthetic_trace.jsonl (Mooncake FAST'25 synthetic trace)")
    for kind, s in fresh.items():
        assert default_prefix_spec(f"mooncake_{kind}") == s, f"shipped {kind} differs from a fresh fit"
    assert set(PREFIX_FITS) == {f"mooncake_{k}" for k in fresh}
    # fit quality of the shared-prefix preset on one draw as long as the trace
    g = generate_prefix_workload(fresh["shared_prefix"], w.span_s, np.random.default_rng(0))
    target = prefix_stats(w)["hit_bound"]
    assert fast_hit_bound(g) == pytest.approx(target, abs=0.05)
    assert len(g) / w.span_s == pytest.approx(len(w) / w.span_s, rel=0.1)
    assert g.prompt_tokens.mean() == pytest.approx(w.prompt_tokens.mean(), rel=0.15)
    assert g.output_tokens.mean() == pytest.approx(w.output_tokens.mean(), rel=0.15)


def test_cli_generates_and_fits_prefix_workloads(reference_dir, tmp_path):
    from typer.testing import CliRunner

    from inferencegym.cli import app
    from inferencegym.workload import read_pool

    out = tmp_path / "g.parquet"
    args = ["data", "generate", "--fit", "mooncake_multiturn", "--duration-s", "120", "--seed", "3",
            "--output", str(out), "--mega-prompt-tokens", "20000", "--mega-every-s", "60"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    w = read_pool(out)
    assert w.hash_block_tokens == 16 and "turn" in w.ints
    mega = w.prompt_tokens == 20000
    assert mega.sum() >= 1 and all(w.hash_ids[i].size == 0 for i in np.flatnonzero(mega))
    r2 = CliRunner().invoke(app, args[:-4] + ["--output", str(tmp_path / "g2.parquet")] + args[-4:])
    assert r2.exit_code == 0 and np.array_equal(read_pool(tmp_path / "g2.parquet").arrival_s, w.arrival_s)
    r = CliRunner().invoke(app, ["data", "generate", "--fit", "mooncake_agent", "--duration-s", "10",
                                 "--output", str(tmp_path / "g.csv")])
    assert r.exit_code == 2 and "cannot hold hash chains" in r.output
    src = reference_dir / "traces/mooncake/synthetic_trace.jsonl"
    r = CliRunner().invoke(app, ["data", "fit", "--input", str(src), "--trace-format", "mooncake", "--output",
                                 str(tmp_path / "fit.json"), "--prefix-specs", str(tmp_path / "mc")])
    assert r.exit_code == 0, r.output
    assert "hit bound 0.65" in r.output
    fitted = PrefixWorkloadSpec.load(tmp_path / "mc_shared_prefix.json")
    assert fitted.num_prefixes == default_prefix_spec("mooncake_shared_prefix").num_prefixes
    assert json.loads((tmp_path / "fit.json").read_text())["source_stats"]["prefix"]["hit_bound"] > 0.6


def test_labelled_turns_of_generated_sessions_agree_with_the_chain_view():
    w = generate_prefix_workload(spec(), 300.0, np.random.default_rng(2))
    t = prefix_stats(w)["turns"]
    assert t["mean_turns_labelled"] == pytest.approx(len(w) / np.unique(w.ints["session"]).size)
    assert t["mean_turns"] == pytest.approx(t["mean_turns_labelled"])  # every later turn holds the previous one
