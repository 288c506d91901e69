"""vLLM's V0 engine (issue 23, profile ``vllm-v0``): multi-step scheduling and the in-process API server.

- Multi-step scheduling (vLLM v0.6 ``--num-scheduler-steps N``, ``ReplicaConfig.num_scheduler_steps``):
  a pure-decode batch runs as a block of N steps; the scheduler is not called inside it, so a prompt
  that arrives mid-block is admitted at the block's end, and a request that finishes inside a block
  is reported at its end. The closed-form decode runs (many iterations at once) keep the rule: they
  give what step-by-step stepping gives.
- The API server in the engine's process (vLLM v0.5, ``EngineParams.api_server_per_request_s``): the
  requests that arrived during a step are handled before the next one, the engine waiting, so a
  burst of N requests holds the first step back N times the per-request time.
Other engine profiles carry neither.
"""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.sim import Cluster, ClusterConfig, ReplicaConfig, Request
from inferencegym.sim.execution import ExecutionModel
from inferencegym.sim.execution_params import engine_params


def _run(reqs, *, steps=1, profile="kernel-only", max_run=None, model=None, check=False, **kw):
    rc = ReplicaConfig(model="llama-3-8b", gpu="a100-80gb", engine_profile=profile, prefix_caching=False,
                       num_scheduler_steps=steps, **kw)
    cl = Cluster(ClusterConfig(replica=rc), rng=np.random.default_rng(0), execution_model=model,
                 max_run_iterations=max_run, check_invariants=check)
    cl.submit(reqs)
    cl.drain()
    return cl


def _pair(t_second: float, out_second: int = 5):
    return [Request(req_id=0, arrival_s=0.0, prompt_tokens=100, output_tokens=50),
            Request(req_id=1, arrival_s=t_second, prompt_tokens=100, output_tokens=out_second)]


def _block_s(m: ExecutionModel, batch: int, s0: int, steps: int) -> float:
    """``steps`` decode iterations of ``batch`` sequences whose contexts sum to ``s0`` at the first."""
    a, b = m.decode_coeffs(batch)
    return steps * a + b * (steps * s0 + batch * steps * (steps - 1) / 2)


@pytest.mark.parametrize("max_run", [None, 1])
def test_a_prompt_arriving_mid_block_starts_at_the_block_boundary(max_run):
    m = ExecutionModel.from_preset(model="llama-3-8b", gpu="a100-80gb", engine_profile="kernel-only")
    a, b = _pair(0.05)
    _run([a, b], steps=10, max_run=max_run)
    first_block_end = a.first_token_s + _block_s(m, 1, 101, 10)  # request 0 alone: contexts 101..110
    assert a.first_token_s < 0.05 < first_block_end  # the second prompt arrives inside the block
    assert b.first_scheduled_s == pytest.approx(first_block_end, abs=1e-9)
    # the engine without multi-step takes it at the next step
    a1, b1 = _pair(0.05)
    _run([a1, b1], steps=1, max_run=max_run)
    assert b1.first_scheduled_s < 0.05 + m.decode_coeffs(1)[0] + m.decode_coeffs(1)[1] * 200
    assert b1.first_scheduled_s < b.first_scheduled_s - 0.05


def test_a_request_finishing_inside_a_block_is_reported_at_the_block_end():
    m = ExecutionModel.from_preset(model="llama-3-8b", gpu="a100-80gb", engine_profile="kernel-only")
    a, b = _pair(0.05, out_second=5)
    _run([a, b], steps=10)
    # after b's prefill step, both decode one 10-step block: a at contexts 111.., b at 101..
    block2_end = b.first_token_s + _block_s(m, 2, 110 + 100 + 2, 10)
    assert b.completion_s == pytest.approx(block2_end, abs=1e-9)  # its 5th token came 6 steps earlier
    a1, b1 = _pair(0.05, out_second=5)
    _run([a1, b1], steps=1)
    assert b1.completion_s - b1.first_token_s < 0.6 * (b.completion_s - b.first_token_s)


def test_closed_form_runs_respect_the_block_rule():
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.exponential(1 / 6.0, 150))
    outs = rng.integers(1, 120, 150)
    def reqs():
        return [Request(req_id=i, arrival_s=float(x), prompt_tokens=int(64 + 7 * i % 300), output_tokens=int(o))
                for i, (x, o) in enumerate(zip(t, outs))]
    fast = _run(reqs(), steps=10, profile="vllm-v0", check=True).results()
    slow = _run(reqs(), steps=10, profile="vllm-v0", max_run=1, check=True).results()
    for k in ("ttft_s", "e2e_s", "first_scheduled_s", "completion_s"):
        np.testing.assert_allclose(fast[k], slow[k], rtol=0, atol=1e-9, err_msg=k)
    one = _run(reqs(), steps=1, profile="vllm-v0").results()
    assert np.median(fast["ttft_s"]) > np.median(one["ttft_s"]) + 0.02  # waiting for the running block


def test_multi_step_needs_what_vllm_needs():
    for bad in ({"scheduler": "sarathi"}, {"speculation_depth": 2}):
        with pytest.raises(ValueError, match="num_scheduler_steps"):
            ReplicaConfig(num_scheduler_steps=10, **bad)
    with pytest.raises(ValueError, match="num_scheduler_steps must be an integer >= 1"):
        ReplicaConfig(num_scheduler_steps=0)
    assert ReplicaConfig().num_scheduler_steps == 1


def _burst(n: int):
    return [Request(req_id=i, arrival_s=0.0, prompt_tokens=120, output_tokens=20) for i in range(n)]


def test_a_bursts_first_tokens_wait_for_the_api_server_n_times_its_per_request_time():
    c = engine_params("vllm-v0").api_server_per_request_s
    assert 1e-3 <= c <= 8e-3  # the 3-8 ms per request of the V0-era bursts (docs/bench/fidelity.md)
    off = ExecutionModel.from_preset(model="llama-3-8b", gpu="a100-80gb", engine_profile="vllm-v0")
    off.api_server_per_request_s = 0.0  # the same engine without the in-process API server
    gaps = []
    for n in (10, 40, 160):
        on = _run(_burst(n), profile="vllm-v0").results()
        base = _run(_burst(n), profile="vllm-v0", model=off).results()
        # the first step starts once all N simultaneous requests went through the API server
        assert on["first_scheduled_s"].min() == pytest.approx(n * c, abs=1e-9)
        assert base["first_scheduled_s"].min() == 0.0
        gap = float(np.mean(on["ttft_s"] - base["ttft_s"]))
        assert gap == pytest.approx(n * c, rel=0.35)  # the mean first token, about N x c later
        gaps.append(gap)
    assert gaps[0] < gaps[1] < gaps[2]


def test_an_arrival_stalls_the_running_batch_for_its_api_work():
    c = engine_params("vllm-v0").api_server_per_request_s
    a, b = _pair(0.05, out_second=5)
    _run([a, b], profile="vllm-v0")
    off = ExecutionModel.from_preset(model="llama-3-8b", gpu="a100-80gb", engine_profile="vllm-v0")
    off.api_server_per_request_s = 0.0
    a0, b0 = _pair(0.05, out_second=5)
    _run([a0, b0], profile="vllm-v0", model=off)
    assert a.tbt_max_s == pytest.approx(a0.tbt_max_s + c, abs=1e-9)  # the step after b's arrival waits
    assert a.first_token_s == pytest.approx(a0.first_token_s + c, abs=1e-9)  # its own arrival too


def test_other_profiles_carry_neither_mechanism():
    for name in ("vllm-v1", "vllm-2023", "kernel-only"):
        assert engine_params(name).api_server_per_request_s == 0.0
        assert ExecutionModel.from_preset(engine_profile=name).api_server_per_request_s == 0.0
