"""Replay a workload against a real OpenAI-compatible deployment and hold the simulator against it.

    from inferencegym.apps.replay import ReplayConfig, run_replay, SimTarget, simulate, compare
    res = run_replay(arrival_s, prompt_tokens, output_tokens,
                     ReplayConfig(endpoint="http://127.0.0.1:8000/v1", model="meta-llama/Llama-2-7b-hf"))
    report = compare(res.records, simulate(..., SimTarget(model="llama-2-7b")), res.itl_s)

CLI: ``inferencegym replay --endpoint URL --model NAME --trace POOL|--task ID`` (docs/openenv.md).
"""

from inferencegym.apps.replay.compare import METRICS, SimTarget, compare, render, simulate
from inferencegym.apps.replay.runner import (
           ReplayConfig,
           ReplayResult,
           make_prompt,
           prepare_workload,
           run_replay,
)

__all__ = ["ReplayConfig", "ReplayResult", "run_replay", "prepare_workload", "make_prompt",
           "SimTarget", "simulate", "compare", "render", "METRICS"]
