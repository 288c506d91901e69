"""Effect sizes of the batching policies and serving techniques on the simulator (the scenarios of
tests/sim/test_sim_literature.py, printed as one JSON object per line).

    python benchmarks/sim_techniques.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sim_util import cfg, clone, poisson_requests, run  # noqa: E402

from inferencegym.sim import Request, TenantSpec  # noqa: E402


def _clean(x):
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, float) and x != x:
        return None
    return x


def emit(name: str, **kw) -> None:
    print(json.dumps(_clean({"scenario": name, **kw})), flush=True)


def r4(x: float) -> float:
    return round(float(x), 4)


def main() -> None:
    # Orca/vLLM vs static: best throughput with p99 TTFT <= 10 s
    for sched in ("vllm", "static"):
        best = 0.0
        for rate in [0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0]:
            reqs = poisson_requests(np.random.default_rng(0), rate=rate, duration_s=120.0, prompt=(64, 1024),
                                    output=(16, 512))
            ws = run(cfg(scheduler=sched), reqs).run_stats()
            if ws.ttft_s["p99"] <= 10.0:
                best = max(best, ws.throughput_req_s)
        emit("iteration_vs_static_batching", scheduler=sched, best_req_s_at_p99_ttft_10s=r4(best))
    # Sarathi vs vLLM under mega-prompts
    rng = np.random.default_rng(0)
    base = poisson_requests(rng, rate=4.0, duration_s=60.0, prompt=(128, 512), output=(128, 512))
    mega = poisson_requests(rng, rate=0.5, duration_s=60.0, prompt=(3500, 4000), output=(8, 32), first_id=100_000)
    reqs = sorted(base + mega, key=lambda r: r.arrival_s)
    for sched in ("vllm", "sarathi"):
        ws = run(cfg(scheduler=sched, chunk_size=512), clone(reqs)).run_stats()
        emit("mega_prompts", scheduler=sched, tbt_s=ws.tbt_s, ttft_s=ws.ttft_s)
    # memory pressure
    reqs = poisson_requests(np.random.default_rng(1), rate=6.0, duration_s=40.0, prompt=(256, 1024),
                            output=(128, 512))
    for f in (1.0, 0.06):
        cl = run(cfg(kv_budget_fraction=f), clone(reqs))
        ws = cl.run_stats()
        emit("memory_pressure", kv_budget_fraction=f, preemptions=int(cl.results()["preemptions"].sum()),
             e2e_s=ws.e2e_s, kv_occupancy_mean=r4(ws.kv_occupancy_mean))
    # speculative decoding, batch 1 and batch 128
    for k in (0, 4):
        r = Request(req_id=0, arrival_s=0.0, prompt_tokens=512, output_tokens=1500)
        cl = run(cfg(speculation_depth=k, spec_acceptance=0.8), [r])
        big = [Request(req_id=i, arrival_s=0.0, prompt_tokens=256, output_tokens=400) for i in range(128)]
        cb = run(cfg(batch_cap=128, speculation_depth=k, spec_acceptance=0.8), big)
        emit("speculative_decoding", k=k, alpha=0.8, tpot_batch1_s=r4(r.tpot_s),
             acceptance=cl.run_stats().spec_acceptance_rate, makespan_batch128_s=r4(cb.now_s))
    # quantization
    for q in ("fp16", "int8", "int4"):
        r = Request(req_id=0, arrival_s=0.0, prompt_tokens=128, output_tokens=300)
        cl = run(cfg(quantization=q), [r])
        emit("quantization", tier=q, tpot_batch1_s=r4(r.tpot_s), kv_blocks=cl.replicas[0].kv.capacity_blocks,
             quality_delta=cl.run_stats().quality_delta)
    # disaggregation
    rng = np.random.default_rng(3)
    base = poisson_requests(rng, rate=10.0, duration_s=60.0, prompt=(128, 512), output=(128, 512))
    mega = poisson_requests(rng, rate=2.0, duration_s=60.0, prompt=(3000, 4000), output=(8, 64), first_id=100_000)
    reqs = sorted(base + mega, key=lambda r: r.arrival_s)
    for dis in (False, True):
        ws = run(cfg(num_replicas=4, disaggregate=dis, prefill_replicas=2), clone(reqs)).run_stats()
        emit("disaggregation", disaggregate=dis, replicas=4, prefill_replicas=2 if dis else 0, tbt_s=ws.tbt_s,
             ttft_s=ws.ttft_s, cost_per_1k_tokens=r4(ws.cost_per_1k_tokens))
    # priority tenants
    ten = (TenantSpec(name="best_effort", priority=0), TenantSpec(name="priority", priority=1))
    reqs = poisson_requests(np.random.default_rng(2), rate=7.0, duration_s=60.0, prompt=(256, 1024),
                            output=(64, 256), tenants=2, priority_tenant=1)
    for on in (False, True):
        ws = run(cfg(tenants=ten, kv_budget_fraction=0.15, priority_routing=on), clone(reqs)).run_stats()
        emit("priority_tenants", priority_routing=on,
             **{f"{n}_ttft_s": t.ttft_s for n, t in ws.tenants.items()},
             **{f"{n}_slo_attainment": t.slo_attainment for n, t in ws.tenants.items()})


if __name__ == "__main__":
    main()
