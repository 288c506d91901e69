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
# that (tests/envs/test_env_tasks_reward_graders.py checks the formula).
#
# Loads follow the measured capacity of one replica under the task's lengths and initial knobs
# (inferencegym.tasks.capacity.measure_capacity_rps, 120 s overload runs, seeds 0-1) on the default
# `vllm-v1` engine: static_workload 8.36 req/s, bursty_workload 4.82, adversarial_multitenant 2.38
# per replica (vllm-2023: 4.98 / 3.82 / 1.91). static_workload runs at 0.67 of it (5.6 req/s;
# 0.48 before: its 25 ms TBT SLO, not throughput, binds, and vllm-v1's decode steps grow less with
# the batch), adversarial_multitenant at 0.71 of its two replicas (3.4 req/s mean; 0.73 before).
# bursty_workload's bursts keep their overload (ON 1.58x capacity; 1.57x before) and its quiet
# phase carries more of the work (OFF 0.39x; 0.13x before; ON/OFF ratio 4 and mean load 0.79, the
# cluster tasks' ClusterOptions defaults): with rates x1.25 (0.6 / 7.5 req/s) INT8 throughout was
# within +0.02 of the phase-aware clairvoyant, since only the quiet phase's tokens gain from FP16.

register_task(TaskSpec(
    task_id="static_workload",
    description="Steady Poisson arrivals, short prompts and a tight time-between-tokens SLO on one "
                "A100: learn the batch-cap / KV-budget / speculation trade-off. Nothing to adapt to: "
                "the best fixed configuration is (near) optimal.",
    difficulty="easy",
    model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=1,
    window_s=1.0, episode_windows=200,
    tenants=(TenantSLO(name="default", priority=0, ttft_slo_s=1.0, tbt_slo_s=0.025),),
    workload=WorkloadSpec(process="poisson", rate_rps=5.6, length_fit="lognormal",
                          prompt_median_tokens=256, prompt_sigma=0.5,
                          output_median_tokens=300, output_sigma=0.5,
                          max_prompt_tokens=2048, max_output_tokens=1024),
    grader=GraderSpec(cost_good_usd_per_1k=2.612e-4, cost_bad_usd_per_1k=1.045e-3),
    ref_batch=16.0,
))

register_task(TaskSpec(
    task_id="bursty_workload",
    description="On/off bursts (Markov-modulated Poisson: 1.9 req/s OFF, 7.6 req/s ON, mean 8 s ON / "
                "16 s OFF, in the spirit of the Azure code trace's 10-s burstiness) with Azure "
                "conversation lengths on one A100: adapt to the phases.",
    difficulty="medium",
    model="llama-2-7b", gpu="a100-80gb", tensor_parallel=1, replicas=1,
    window_s=1.0, episode_windows=200,
    chunk_size_tokens=512,
    tenants=(TenantSLO(name="default", priority=0, ttft_slo_s=2.0, tbt_slo_s=0.04),),
    workload=WorkloadSpec(process="onoff", rate_rps=1.9, burst_rate_rps=7.6,
                          on_mean_s=8.0, off_mean_s=16.0, length_fit="azure_conv",
                          max_prompt_tokens=4096, max_output_tokens=512),
    grader=GraderSpec(cost_good_usd_per_1k=6.643e-4, cost_bad_usd_per_1k=2.657e-3),
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
    router="least_outstanding_requests", split_mode="chunked",
    window_s=1.0, episode_windows=200,
    tenants=(TenantSLO(name="interactive", priority=1, ttft_slo_s=1.0, tbt_slo_s=0.05, grade_weight=2.0),
             TenantSLO(name="batch", priority=0, ttft_slo_s=6.0, tbt_slo_s=0.15, grade_weight=1.0)),
    workload=WorkloadSpec(process="sinusoidal", rate_rps=3.4, amplitude=0.9, period_s=60.0,
                          length_fit="lognormal", prompt_median_tokens=1500, prompt_sigma=0.6,
                          output_median_tokens=300, output_sigma=0.6,
                          max_prompt_tokens=6000, max_output_tokens=1024,
                          tenant_shares=(0.5, 0.5), tenant_rate_profile=("modulated", "modulated"),
                          mega_prompt_rate_per_s=0.4, mega_prompt_tokens=24000,
                          mega_prompt_output_tokens=16, mega_prompt_tenant=1, mega_prompt_when="low"),
    grader=GraderSpec(cost_good_usd_per_1k=8.101e-4, cost_bad_usd_per_1k=3.240e-3),
    ref_batch=16.0,
))
