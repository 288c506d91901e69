"""Agreement with Vidur's own outputs on Vidur's scenarios (kernel-time model, like Vidur's profiles)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inferencegym.sim import Cluster, ClusterConfig, ExecutionModel, ReplicaConfig, Request


@pytest.mark.parametrize("label,scheduler,qps", [("r1_vllm_fixed512x128_qps2", "vllm", 2.0),
                                                  ("r1_sarathi_fixed512x128_qps4", "sarathi", 4.0)])
def test_latencies_match_vidur_on_kernel_times(reference_dir, label, scheduler, qps):
    vid = pd.read_csv(reference_dir / "vidur" / "derived" / "vidur_scenario_results_llama2_7b_a100.csv")
    v = vid.set_index("label").loc[label]
    model = ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1,
                                       engine_overhead=False)
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(1.0 / qps, size=2000))
    reqs = [Request(req_id=i, arrival_s=float(x), prompt_tokens=512, output_tokens=128) for i, x in enumerate(t)]
    cl = Cluster(ClusterConfig(replica=ReplicaConfig(scheduler=scheduler, chunk_size=512)),
                 np.random.default_rng(0), execution_model=model)
    cl.submit(reqs)
    cl.drain()
    ws = cl.run_stats()
    assert ws.tpot_s["p50"] == pytest.approx(v["tpot_p50_s"], rel=0.05)
    assert ws.e2e_s["p50"] == pytest.approx(v["e2e_p50_s"], rel=0.05)
    assert ws.ttft_s["p50"] == pytest.approx(v["ttft_p50_s"], rel=0.15)
    assert ws.tbt_s["p99"] == pytest.approx(v["tbt_p99_s"], rel=0.15)
