"""The BLIS vLLM-V1 replay (benchmarks/engine_validation.py): its workload shares prefixes as
inference-perf's does, and the prefix-sharing replay meets the issue's 20 % band where it is met."""

from __future__ import annotations

import csv
import importlib.util

import numpy as np
import pytest

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig
from inferencegym.sim.calibration.blis import WORKLOADS, decode_anchors, load_runs
from inferencegym.workload.inference_perf import InferencePerfSharedPrefix, generate_inference_perf


def _load_ev(repo_root):
    spec = importlib.util.spec_from_file_location("engine_validation", repo_root / "benchmarks" / "engine_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _spec(**kw) -> InferencePerfSharedPrefix:
    d = dict(WORKLOADS["roleplay"], stages=((6.0, 60.0),))
    d.update(kw)
    return InferencePerfSharedPrefix(**d)


def test_prompts_repeat_every_n_and_groups_share_system_prompt():
    w = generate_inference_perf(_spec(), np.random.default_rng(0))
    reqs = w.to_requests()
    n = _spec().num_prompts
    assert len(reqs) == 360 and n == 50
    assert all(r.prompt_tokens == 750 and r.output_tokens == 251 for r in reqs)
    # request d sends prompt d mod N: identical chains N apart, different ones in between
    assert all(reqs[d].block_hashes == reqs[d + n].block_hashes for d in range(len(reqs) - n))
    assert len({r.block_hashes for r in reqs[:n]}) == n
    # the 150-token system prompt: 9 full blocks shared by the 5 prompts of a group, never block 10
    firsts = [r.block_hashes[:9] for r in reqs[:n]]
    assert sorted(firsts.count(f) for f in set(firsts)) == [5] * 10
    assert len({r.block_hashes[9] for r in reqs[:n]}) == n


def test_constant_load_stages_and_determinism():
    s = _spec(stages=((8.0, 10.0), (20.0, 10.0)))
    w = generate_inference_perf(s, np.random.default_rng(3))
    a = w.arrival_s
    assert a.size == 80 + 200
    assert np.isclose(a[79], 10.0) and np.isclose(a[-1], 20.0) and np.all(np.diff(a) >= 0)
    w2 = generate_inference_perf(s, np.random.default_rng(3))
    assert np.array_equal(a, w2.arrival_s) and all(
        np.array_equal(x, y) for x, y in zip(w.hash_ids, w2.hash_ids))


def test_fresh_questions_share_only_the_system_prompt():
    reqs = generate_inference_perf(_spec(reuse_prompts=False), np.random.default_rng(0)).to_requests()
    assert len({r.block_hashes for r in reqs}) == len(reqs)
    assert len({r.block_hashes[:9] for r in reqs}) == 10


def test_bad_settings_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="num_groups"):
        _spec(num_groups=0)
    with pytest.raises(ValueError, match=r"stages\[0\]"):
        _spec(stages=((0.0, 10.0),))
    with pytest.raises(ValueError, match="prompt_token_scale"):
        _spec(prompt_token_scale=0.0)


def test_the_simulator_hits_the_prefix_cache_on_the_replay():
    """The prefix cache reuses all but the last partial block of a repeated prompt (vLLM V1)."""
    reqs = generate_inference_perf(_spec(), np.random.default_rng(0)).to_requests()
    rc = ReplicaConfig(model="llama-2-7b", gpu="h100-80gb", scheduler="sarathi", chunk_size=2048, batch_cap=128)
    cl = Cluster(ClusterConfig(replica=rc, num_replicas=1), rng=np.random.default_rng(0))
    cl.submit(reqs)
    cl.drain()
    cached = np.array([r.cached_tokens for r in reqs])
    assert np.all(cached[50:] == 736)  # 46 full blocks of 750 tokens
    assert np.all(cached[:50] <= 144)  # first sight: at most the group's 9 system-prompt blocks
    assert cached.sum() / sum(r.prompt_tokens for r in reqs) > 0.8


# ------------------------------------------------------------------ against the measured runs
BAND_TPOT = ("llama-2-70b-hf-tp4-codegen", "llama-2-70b-tp4-roleplay",
             "codellama-34b-tp2-codegen", "codellama-34b-tp2-roleplay", "llama-2-7b-tp1-roleplay")
"""The five runs the simulated replica keeps up with (docs/bench/fidelity.md): TTFT within 15 % with
asynchronous scheduling and the front end (issue 23), TPOT within 15 % (10 % on four, the TP1 run
-12 %). Of the two general runs the TP2 one no longer saturates; the TP4 one does at 20 req/s."""


def test_runs_and_anchors_load(reference_dir):
    runs = {r.name: r for r in load_runs(reference_dir)}
    assert len(runs) == 7 and set(BAND_TPOT) <= set(runs)
    r = runs["llama-2-70b-tp4-roleplay"]
    assert r.tp == 4 and r.output_tokens == 251 and abs(r.prompt_token_scale - 1.05) < 0.01
    # the settings agree with BLIS's own diagnosis of each run's spec (rate, count, lengths)
    with open(reference_dir / "engines/blis-stepml-vllm-h100-gt/workload_diagnosis.csv") as f:
        diag = list(csv.DictReader(f))
    assert len(diag) == 10
    for d in diag:
        w = WORKLOADS[d["workload"]]
        n = sum(rate * dur for rate, dur in w["stages"])
        assert n == float(d["spec_num_requests"]) and n / sum(dur for _, dur in w["stages"]) == float(
            d["spec_arrival_rate_rps"])
        assert (w["question_tokens"], w["output_tokens"]) == (int(d["spec_question_len"]), int(d["spec_output_len"]))
    anchors = {a.experiment.split("-", 2)[-1]: a for a in decode_anchors(reference_dir)}
    assert set(anchors) == {"llama-2-70b-tp4-roleplay", "codellama-34b-tp2-roleplay"}
    assert anchors["llama-2-70b-tp4-roleplay"].batch == 27


def test_prefix_sharing_replay_within_band(reference_dir, repo_root):
    ev = _load_ev(repo_root)
    rows = ev.validate(reference_dir, ["vllm-v1"], ("none", "inference-perf"), runs=BAND_TPOT)
    assert len(rows) == len(BAND_TPOT)
    for r in rows:
        assert r["hit_rate_inference-perf"] > 0.95, r
        assert abs(r["tpot_err_pct_inference-perf"]) <= 15.0, r
        # the replay without sharing is further off on the large models (TPOT over-predicted by
        # 40-70 %: every prompt prefilled in full); on the TP1 7B run the cost hides behind its step
        if "-tp1-" not in r["run"]:
            assert abs(r["tpot_err_pct_none"]) > abs(r["tpot_err_pct_inference-perf"]) + 5.0, r
        # TTFT: the first token at step k+2 (asynchronous scheduling) plus the API server
        assert abs(r["ttft_err_pct_inference-perf"]) <= 15.0, r


def test_committed_serving_bands_are_what_the_comparisons_give(reference_dir, repo_root):
    """``calibration_error.json['serving']`` is current: benchmarks/serving_bands.py re-run (~50 s)."""
    import json
    import sys

    sys.path.insert(0, str(repo_root / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("serving_bands", repo_root / "benchmarks" / "serving_bands.py")
        sb = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sb)
    finally:
        sys.path.remove(str(repo_root / "benchmarks"))
    fresh = sb.bands(sb.comparisons(reference_dir))
    committed = json.loads((repo_root / "inferencegym" / "data" / "calibration_error.json").read_text())["serving"]
    assert fresh.keys() == committed.keys()
    for prof, d in fresh.items():
        for k in ("ttft", "tpot", "e2e"):
            for f in ("mape_pct", "max_ape_pct", "mean_err_pct"):
                assert committed[prof][k][f] == pytest.approx(d[k][f], abs=0.15), (prof, k, f)
    # the issue's goals on the V1 engine, every point: TTFT within 20 % (the published load points'
    # goal; the BLIS runs' 15 % is checked above, per run) and TPOT within 15 %. The TTFT max is
    # DigitalOcean's 70B FP8 H200 point at 1 req/s, +15 % (docs/bench/fidelity.md, fifth session)
    assert fresh["vllm-v1"]["ttft"]["max_ape_pct"] <= 20.0 and fresh["vllm-v1"]["tpot"]["max_ape_pct"] <= 15.0
