"""Baseline inference script: an LLM (through the official ``openai`` client) plays every InferenceGym
task and the run is printed in the OpenEnv hackathon format.

Environment variables:

* ``API_BASE_URL`` (default ``https://router.huggingface.co/v1``), ``MODEL_NAME`` (default
  ``Qwen/Qwen2.5-72B-Instruct``), ``HF_TOKEN`` (or ``OPENAI_API_KEY``; required): the model.
* ``ENV_URL``: an InferenceGym server (``inferencegym server``); unset = run the env in process.
* ``INFERENCE_TASKS``: comma-separated task ids (default: the three single-agent tasks).
* ``INFERENCE_SEED`` (default 0): episode seed of every task.
* ``LLM_DECISION_EVERY`` (default 10): ask the model every N control windows and hold its action
  in between (bounds the number of LLM calls: 3 tasks x 200 windows / 10 = 60 decisions).
* ``INFERENCE_TIME_BUDGET_S`` (default 1080 = 18 min): past this, actions are held without new
  LLM calls so the run always finishes within 20 minutes.
* ``INFERENCE_SUCCESS_SCORE`` (default 0.5): ``success=true`` when the episode completes with a grade
  at least this.

stdout holds only these lines (rewards with 2 decimals, lowercase booleans)::

    [START] task=<task> env=inferencegym model=<model>
    [STEP] step=<n> action=<json> reward=<0.00> done=<true|false> error=<msg|null>
    [END] success=<true|false> steps=<n> rewards=<r1,r2,...>

The grade of each episode goes to stderr (``# task=<task> grade=<score>``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

BENCHMARK = "inferencegym"
DEFAULT_TASKS = ("static_workload", "bursty_workload", "adversarial_multitenant")

API_BASE_URL = os.getenv("API_BASE_URL", "https://router.huggingface.co/v1")
MODEL_NAME = os.getenv("MODEL_NAME", "Qwen/Qwen2.5-72B-Instruct")
HF_TOKEN = os.getenv("HF_TOKEN") or os.getenv("OPENAI_API_KEY")
ENV_URL = os.getenv("ENV_URL")


def _b(x: bool) -> str:
    return "true" if x else "false"


def _one_line(msg: Any) -> str:
    return " ".join(str(msg).split())[:300] or "error"


def _info_from(obs: Any) -> dict[str, Any]:
    """The LLM policy's view of an observation: raw window metrics and the current configuration."""
    info: dict[str, Any] = {f"sim/{k}": v for k, v in (obs.raw or {}).items()}
    if obs.action is not None:
        info["action"] = obs.action
    return info


class _LocalEnv:
    """The OpenEnv adapter in process (same code path as the server's sessions)."""

    def __init__(self) -> None:
        from inferencegym.apps.env_server.environment import InferenceGymEnvironment

        self.env = InferenceGymEnvironment()

    def reset(self, task_id: str, seed: int):
        return self.env.reset(seed=seed, task_id=task_id)

    def step(self, action: Any):
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()


class _RemoteEnv:
    """An InferenceGym server through the HTTP session client."""

    def __init__(self, url: str) -> None:
        from inferencegym.apps.env_server.client import InferenceGymClient

        self.client = InferenceGymClient(url)

    def reset(self, task_id: str, seed: int):
        return self.client.reset(task_id=task_id, seed=seed).observation

    def step(self, action: Any):
        return self.client.step(action).observation

    def close(self) -> None:
        self.client.close()


def run_task(task_id: str, seed: int, policy: Any, deadline: float, every: int,
             success_score: float) -> float | None:
    """Play one episode; prints [START] / [STEP]... / [END]; returns the grade (None on failure)."""
    print(f"[START] task={task_id} env={BENCHMARK} model={MODEL_NAME}", flush=True)
    rewards: list[float] = []
    steps = 0
    grade = None
    env = None
    try:
        if policy is None:
            raise RuntimeError("no LLM policy (see stderr)")
        env = _RemoteEnv(ENV_URL) if ENV_URL else _LocalEnv()
        obs = env.reset(task_id, seed)
        action = None
        while not obs.done:
            error = None
            if action is None or (steps % every == 0 and time.monotonic() < deadline):
                action = policy.act(None, _info_from(obs))
                error = policy.last_error  # set when the reply was invalid (fallback or retry)
            try:
                obs = env.step(action)
            except Exception as exc:  # an env/server error ends the episode, reported in [STEP]
                steps += 1
                rewards.append(0.0)
                print(f"[STEP] step={steps} action={json.dumps(action.model_dump(), separators=(',', ':'))} "
                      f"reward=0.00 done=true error={_one_line(exc)}", flush=True)
                break
            steps += 1
            r = float(obs.reward or 0.0)
            rewards.append(r)
            print(f"[STEP] step={steps} action={json.dumps(action.model_dump(), separators=(',', ':'))} "
                  f"reward={r:.2f} done={_b(obs.done)} error={_one_line(error) if error else 'null'}",
                  flush=True)
        if obs.done and obs.grade is not None:
            grade = float(obs.grade)
    except Exception as exc:
        print(f"# task={task_id} failed: {_one_line(exc)}", file=sys.stderr, flush=True)
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:
                pass
        success = grade is not None and grade >= success_score
        print(f"[END] success={_b(success)} steps={steps} rewards={','.join(f'{r:.2f}' for r in rewards)}",
              flush=True)
    print(f"# task={task_id} grade={grade if grade is None else round(grade, 4)}", file=sys.stderr,
          flush=True)
    return grade


def main() -> int:
    tasks = [t.strip() for t in os.getenv("INFERENCE_TASKS", ",".join(DEFAULT_TASKS)).split(",") if t.strip()]
    seed = int(os.getenv("INFERENCE_SEED", "0"))
    every = max(1, int(os.getenv("LLM_DECISION_EVERY", "10")))
    budget_s = float(os.getenv("INFERENCE_TIME_BUDGET_S", "1080"))
    success_score = float(os.getenv("INFERENCE_SUCCESS_SCORE", "0.5"))
    start = time.monotonic()

    policies: dict[str, Any] = {}
    for t in tasks:
        if not HF_TOKEN:
            print("# HF_TOKEN (or OPENAI_API_KEY) is not set: the LLM policy cannot run",
                  file=sys.stderr, flush=True)
            policies[t] = None
            continue
        from openai import OpenAI

        from inferencegym.policies.llm import LLMPolicy

        client = OpenAI(base_url=API_BASE_URL, api_key=HF_TOKEN, timeout=60.0, max_retries=1)
        policies[t] = LLMPolicy(t, model=MODEL_NAME, client=client)

    grades = []
    for i, t in enumerate(tasks):
        # share the remaining time budget among the remaining tasks
        remaining = budget_s - (time.monotonic() - start)
        deadline = time.monotonic() + max(0.0, remaining / (len(tasks) - i))
        grades.append(run_task(t, seed, policies[t], deadline, every, success_score))
    done = [g for g in grades if g is not None]
    print(f"# mean grade over {len(done)}/{len(tasks)} tasks: "
          f"{(sum(done) / len(done)) if done else float('nan'):.4f} "
          f"({time.monotonic() - start:.1f} s)", file=sys.stderr, flush=True)
    return 0 if len(done) == len(tasks) else 1


if __name__ == "__main__":
    sys.exit(main())
