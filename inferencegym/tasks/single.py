"""The single-agent tasks (``kind="single"``, run by ``LLMServeEnv``).

>>> from inferencegym.tasks import task_ids
>>> task_ids("single")
['static_workload', 'bursty_workload', 'adversarial_multitenant']
"""

from __future__ import annotations

from inferencegym.tasks.spec import GraderSpec, TaskSpec, TenantSLO, WorkloadSpec, register_task

# ---------------------------------------------------------------------------------------------
# The single-agent tasks. Sizes keep one env step cheap (a few arrivals and at most a few dozen
# running requests per window; see docs/environments.md "Why these windows"). The grader's cost
# references are cost_good = (GPU $/s of the cluster) / (nominal offered output tokens/s) * 1000,
# i.e. the cost per 1k tokens when every offered token is served within SLO, and cost_bad = 4x
# that (tests/test_env_tasks_reward_graders.py checks the formula).

register_task(TaskSpec(
    task_id="static_workload",
    description="Steady Poisson arrivals, short prompts and a tight time-between-tokens SLO on one "
                "A100: learn the batch-cap / KV-budget / speculation trade-off. Nothing to adapt to: "
                "the best fixed configuration is (near) optimal.",
    difficulty="easy",
    model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=1,
    engine_profile="vllm-2023",  # loads/SLOs set against the 2023 engine; re-derive for vllm-v1
    window_s=1.0, episode_windows=200,
    tenants=(TenantSLO(name="default", priority=0, ttft_slo_s=1.0, tbt_slo_s=0.025),),
    workload=WorkloadSpec(process="poisson", rate_rps=2.4, length_fit="lognormal",
                          prompt_median_tokens=256, prompt_sigma=0.5,
                          output_median_tokens=300, output_sigma=0.5,
                          max_prompt_tokens=2048, max_output_tokens=1024),
    grader=GraderSpec(cost_good_usd_per_1k=6.095e-4, cost_bad_usd_per_1k=2.438e-3),
    ref_batch=16.0,
))

register_task(TaskSpec(
    task_id="bursty_workload",
    description="On/off bursts (Markov-modulated Poisson: 0.5 req/s OFF, 6 req/s ON, mean 8 s ON / "
                "16 s OFF, in the spirit of the Azure code trace's 10-s burstiness) with Azure "
                "conversation lengths on one A100: adapt to the phases.",
    difficulty="medium",
    model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=1,
    engine_profile="vllm-2023",  # loads/SLOs set against the 2023 engine; re-derive for vllm-v1
    window_s=1.0, episode_windows=200,
    chunk_size_tokens=512,
    tenants=(TenantSLO(name="default", priority=0, ttft_slo_s=2.0, tbt_slo_s=0.04),),
    workload=WorkloadSpec(process="onoff", rate_rps=0.5, burst_rate_rps=6.0,
                          on_mean_s=8.0, off_mean_s=16.0, length_fit="azure_conv",
                          max_prompt_tokens=4096, max_output_tokens=512),
    grader=GraderSpec(cost_good_usd_per_1k=1.082e-3, cost_bad_usd_per_1k=4.328e-3),
    ref_batch=16.0,
))

register_task(TaskSpec(
    task_id="adversarial_multitenant",
    description="Two tenants on two A100 replicas (interactive: priority, tight SLO, weight 2; "
                "batch: best effort, loose SLO), sinusoidal load, and an adversary that hides in the "
                "quiet half of the cycle and floods unannounced 24k-token mega-prompts: switch "
                "priority routing, KV admission and chunked prefill as the phase changes.",
    difficulty="hard",
    model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=2, prefill_replicas=1,
    engine_profile="vllm-2023",  # loads/SLOs set against the 2023 engine; re-derive for vllm-v1
    router="least_outstanding_requests", split_mode="chunked",
    window_s=1.0, episode_windows=200,
    tenants=(TenantSLO(name="interactive", priority=1, ttft_slo_s=1.0, tbt_slo_s=0.05, grade_weight=2.0),
             TenantSLO(name="batch", priority=0, ttft_slo_s=6.0, tbt_slo_s=0.15, grade_weight=1.0)),
    workload=WorkloadSpec(process="sinusoidal", rate_rps=2.8, amplitude=0.9, period_s=60.0,
                          length_fit="lognormal", prompt_median_tokens=1500, prompt_sigma=0.6,
                          output_median_tokens=300, output_sigma=0.6,
                          max_prompt_tokens=6000, max_output_tokens=1024,
                          tenant_shares=(0.5, 0.5), tenant_rate_profile=("modulated", "modulated"),
                          mega_prompt_rate_per_s=0.4, mega_prompt_tokens=24000,
                          mega_prompt_output_tokens=16, mega_prompt_tenant=1, mega_prompt_when="low"),
    grader=GraderSpec(cost_good_usd_per_1k=9.839e-4, cost_bad_usd_per_1k=3.935e-3),
    ref_batch=16.0,
))
