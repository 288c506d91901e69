"""Env steps per second per task on one core, without RLlib.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/env_speed.py [--episodes 3] [--json]

For each single-agent task and each shipped non-LLM baseline (static_default: no speculation;
heuristic; random: every knob moves, including speculation and quantization switches; best_static;
phase_rule; clairvoyant, privileged: run with ``privileged=True``), runs whole episodes and reports the
median over episodes of steps per second in CPU time of this process (``time.process_time``: the
machine is shared, so wall time would measure the neighbours) and in wall time.

Each row starts after a full garbage collection (``gc.collect()``, outside the timed episodes), so
no row pays for the heap the rows before it left: otherwise the one generation-2 collection of a
run (~20 ms, a quarter of a 400-step row) lands in whichever row crosses the collector's threshold
and moves with the allocation counts of every row before it (``docs/bench/env_speed10.md``). The
generation-2 collections inside a row's timed episodes are reported (``gc_gen2``).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

from inferencegym.envs import list_tasks
from inferencegym.evaluation.single import to_env_action
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.policies import get_policy, is_privileged

BASELINES = "static_default,heuristic,random,best_static,phase_rule,clairvoyant"
"""Every shipped single-agent baseline except ``llm`` (a chat model behind an API)."""


def bench(task_id: str, policy_name: str, episodes: int, seed: int = 0) -> dict:
    env = LLMServeEnv(task_id, privileged=is_privileged(policy_name))
    pol = get_policy(policy_name, task_id)
    cpu, wall, reqs = [], [], []
    gc.collect()  # (see the module docstring)
    gen2 = gc.get_stats()[2]["collections"]
    for e in range(episodes):
        if hasattr(pol, "reset"):
            pol.reset(seed=seed + e)
        obs, info = env.reset(seed=seed + e)
        c0, w0 = time.process_time(), time.perf_counter()
        n = 0
        while True:
            obs, r, term, trunc, info = env.step(to_env_action(pol.act(obs, info)))
            n += 1
            if trunc or term:
                break
        cpu.append(n / (time.process_time() - c0))
        wall.append(n / (time.perf_counter() - w0))
        reqs.append(env.episode_metrics()["offered_requests"] / n)
    gen2 = gc.get_stats()[2]["collections"] - gen2  # (the resets' included: an upper bound)
    return {"task": task_id, "policy": policy_name, "episodes": episodes,
            "steps_per_episode": env.task.episode_windows,
            "requests_per_step": round(statistics.median(reqs), 2),
            "steps_per_s_cpu_median": round(statistics.median(cpu), 1),
            "steps_per_s_wall_median": round(statistics.median(wall), 1),
            "ms_per_step_cpu_median": round(1000.0 / statistics.median(cpu), 3),
            "gc_gen2": gen2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--policies", default=BASELINES)
    ap.add_argument("--tasks", default=None, help="comma-separated task ids (default: every single-agent task)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    tasks = args.tasks.split(",") if args.tasks else [t.task_id for t in list_tasks(kind="single")]
    for t in tasks:
        for p in args.policies.split(","):
            row = bench(t, p, args.episodes)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    if not args.json:
        print(f"{'task':26s} {'policy':15s} {'req/step':>8s} {'steps/s (cpu)':>14s} {'steps/s (wall)':>15s}")
        for r in rows:
            print(f"{r['task']:26s} {r['policy']:15s} {r['requests_per_step']:8.2f} "
                  f"{r['steps_per_s_cpu_median']:14.1f} {r['steps_per_s_wall_median']:15.1f}")


if __name__ == "__main__":
    main()
