"""Pipeline parallelism: layers split into stages, each engine step cut into micro-batches that
follow each other through the stages (vLLM V1 ``--pipeline-parallel-size``, Vidur's stages).
PP buys memory (per-GPU weights and KV per token shrink ~P-fold) and compute-bound throughput; a
memory-bound decode reads every weight once per step as before; fewer sequences than stages leave
a bubble."""

import numpy as np
import pytest

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.pipeline import microbatch_count, split_microbatches, step_time_s


def _m(pp: int, tp: int = 1, model: str = "llama-3-8b", **kw) -> ExecutionModel:
    return ExecutionModel.from_preset(model=model, gpu="h100-80gb", tensor_parallel=tp, pipeline_parallel=pp, **kw)


def test_stages_hold_their_share_of_weights_and_kv():
    one, two, four = _m(1), _m(2), _m(4)
    assert two.gpu_count == 2 and four.gpu_count == 4
    assert two.kv_bytes_per_token == pytest.approx(one.kv_bytes_per_token / 2)
    assert four.kv_bytes_per_token == pytest.approx(one.kv_bytes_per_token / 4)
    # weights: half the layers plus the embedding or the LM head (not both)
    assert 0.45 < two.weight_bytes_per_gpu / one.weight_bytes_per_gpu < 0.6
    assert two.kv_capacity_tokens() > 2 * one.kv_capacity_tokens()  # more free memory and fewer layers
    # a model too big for one GPU fits on PP stages
    with pytest.raises(ValueError, match="weights per GPU"):
        _m(1, model="llama-3-70b")
    assert _m(4, model="llama-3-70b").kv_capacity_tokens() > 0


def test_a_lone_sequence_gains_nothing_and_pays_the_sends():
    one, four = _m(1), _m(4)
    # batch 1: one micro-batch crosses 4 stages of 1/4 of the layers (a bubble of 3 slots)
    t1, t4 = one.decode_step_time_s(1, 500), four.decode_step_time_s(1, 500)
    assert t4 >= 0.95 * t1


def test_memory_bound_decode_reads_the_weights_once_per_step():
    one, two = _m(1, engine_profile="kernel-only"), _m(2, engine_profile="kernel-only")
    # batch 64 at 100 tokens (weight-bound): 2 micro-batches x 2 stages, each stage reads half the
    # weights per micro-batch, so a GPU reads all of its weights twice per step: far from 2x faster
    # (only the per-token work, norms, activations, attention per sequence, is shared: ~10 %)
    r = two.decode_step_time_s(64, 100) / one.decode_step_time_s(64, 100)
    assert 0.85 < r < 1.1
    # at 1,000 tokens the KV reads (half per GPU: each holds half the layers) are shared: faster
    r_kv = two.decode_step_time_s(64, 1000) / one.decode_step_time_s(64, 1000)
    assert 0.7 < r_kv < r


def test_compute_bound_prefill_gains_from_the_stages():
    one, four = _m(1, engine_profile="kernel-only"), _m(4, engine_profile="kernel-only")
    chunks = [(2048, 0)] * 8
    # 8 prompts of 2,048 tokens: 4 micro-batches of 2 through 4 stages; a step is ~one micro-batch's
    # whole-model time, a quarter of the batch, plus the sends
    r = four.iteration_time_s(chunks) / one.iteration_time_s(chunks)
    assert 0.2 < r < 0.4


def test_decode_coefficients_match_the_step_exactly():
    two = _m(2)
    a, b = two.decode_coeffs(48, 0)
    for ctx in (0, 10_000, 300_000):
        assert a + b * ctx == pytest.approx(two.iteration_time_s((), 48, ctx, 0), rel=1e-9)


def test_microbatches_split_the_work_and_unequal_ones_pace_the_pipeline():
    parts = split_microbatches([(512, 0), (128, 0)], 6, 600, 2)
    assert sum(len(p[0]) for p in parts) == 2 and sum(p[1] for p in parts) == 6
    assert sum(p[2] for p in parts) == pytest.approx(600)
    assert microbatch_count(1, 4) == 1 and microbatch_count(9, 4) == 4
    assert step_time_s([1.0, 3.0], 4, 2) == pytest.approx(12.0)  # bubble: 4 slots of the slowest
    assert step_time_s([1.0, 1.0, 1.0, 1.0], 4, 4) == pytest.approx(4.0)


def test_bad_pipeline_configs_are_refused():
    with pytest.raises(ValueError, match="pipeline_parallel must be one of"):
        _m(3)
    with pytest.raises(ValueError, match="pipeline_parallel must be 1, 2, 4 or 8"):
        ReplicaConfig(pipeline_parallel=3)
    with pytest.raises(ValueError, match="speculative decoding with pipeline_parallel"):
        ReplicaConfig(pipeline_parallel=2, speculation_depth=2)


def test_a_pipelined_replica_serves_requests_and_bills_its_gpus():
    rc = ReplicaConfig(model="llama-3-70b", gpu="h100-80gb", tensor_parallel=2, pipeline_parallel=2,
                       scheduler="sarathi", chunk_size=2048)
    c = Cluster(ClusterConfig(replica=rc, num_replicas=1, router="round_robin"))
    c.submit([Request(req_id=i, arrival_s=0.1 * i, prompt_tokens=1000, output_tokens=50) for i in range(20)])
    c.drain()
    r = c.results()
    assert (~r["rejected"]).sum() == 20
    assert c.replicas[0].model.gpu_count == 4


def test_simulate_takes_pipeline_parallel():
    import json

    from typer.testing import CliRunner

    from inferencegym.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["simulate", "--model", "llama-3-70b", "--gpu", "h100-80gb", "--tensor-parallel", "2",
                              "--pipeline-parallel", "2", "--rate", "2", "--duration-s", "5", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(next(ln for ln in res.output.splitlines() if ln.strip()))
    assert out["gpus"] == 4 and out["requests_completed"] > 0
    assert out["config"]["replica"]["pipeline_parallel"] == 2
    bad = runner.invoke(app, ["simulate", "--pipeline-parallel", "3", "--duration-s", "5"])
    assert bad.exit_code == 2 and "pipeline_parallel must be 1, 2, 4 or 8" in bad.output


def test_each_microbatch_has_the_whole_token_budget_as_vllms_batch_queue_schedules_it():
    """vLLM V1 with P stages schedules each in-flight micro-batch with its own max_num_batched_tokens:
    a burst's first iteration prefills up to P x chunk_size tokens (twice as many whole prompts reach
    their first token together at P = 2), while one prompt's chunk stays within one micro-batch's
    budget (a long prompt takes as many iterations as at P = 1)."""

    def run(pp: int, prompts: list[int], out: int = 4) -> Cluster:
        rc = ReplicaConfig(model="llama-3-70b", gpu="h100-80gb", tensor_parallel=2, pipeline_parallel=pp,
                           scheduler="sarathi", chunk_size=2048)
        c = Cluster(ClusterConfig(replica=rc, num_replicas=1, router="round_robin"))
        c.submit([Request(req_id=i, arrival_s=0.0, prompt_tokens=p, output_tokens=out)
                  for i, p in enumerate(prompts)])
        c.drain()
        return c

    def firsts(pp: int) -> int:  # prompts finishing in the first full iteration (the burst's first
        t = np.sort(run(pp, [600] * 12).results()["first_token_s"])  # arrival runs one of its own)
        return int(np.sum(np.isclose(t, t[1])))

    assert firsts(1) == 3 and firsts(2) == 6  # 2,048 // 600 whole prompts a micro-batch
    for pp in (1, 2):  # 10,000 tokens: five chunks of 2,048, then the single output token's step
        assert run(pp, [10_000], out=1).replicas[0].iterations == 5
