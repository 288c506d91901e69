"""Run one task x baseline for a given number of env steps in one process (a fixed workload for
instruction counts: ``valgrind --tool=callgrind``, where ``env_speed.py``'s 18 rows take too long).

    STEPS=100 PYTHONHASHSEED=0 OMP_NUM_THREADS=1 PYTHONPATH=$PWD valgrind --tool=callgrind \\
        .venv/bin/python -P benchmarks/env_steps_once.py adversarial_multitenant heuristic 1

Arguments: task id, baseline policy, episodes (seeds 0, 1, ...); ``STEPS`` caps the steps of each
episode (default: whole episodes; ``STEPS=0``: imports, env and policy set-up and the resets only,
the part to subtract). Prints nothing: the instruction count is callgrind's "Collected".
"""

from __future__ import annotations

import os
import sys

from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.evaluation.single import to_env_action
from inferencegym.policies import get_policy, is_privileged


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit("usage: env_steps_once.py TASK POLICY EPISODES  (env STEPS caps steps per episode)")
    task, policy, episodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    steps = int(os.environ.get("STEPS", "1000000000"))
    env = LLMServeEnv(task, privileged=is_privileged(policy))
    pol = get_policy(policy, task)
    for seed in range(episodes):
        if hasattr(pol, "reset"):
            pol.reset(seed=seed)
        obs, info = env.reset(seed=seed)
        n = 0
        while n < steps:
            n += 1
            obs, _r, term, trunc, info = env.step(to_env_action(pol.act(obs, info)))
            if term or trunc:
                break


if __name__ == "__main__":
    main()
