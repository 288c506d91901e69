"""The floor envs of benchmarks/train_throughput.py replay a real episode with RLlib's contract."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import trivial_envs  # noqa: E402


def test_cluster_floor_env_gives_every_agent_a_last_observation_at_truncation():
    """RLlib raises MultiAgentEnvError ('acted and then got truncated, but did NOT receive a last
    observation') when an agent that acted is missing from the truncating step's observations:
    the replay must end on the real env's final frame, which holds the router and every replica."""
    rec = trivial_envs.record_cluster({"task_id": "cluster_routing", "episode_windows": 3})
    env = trivial_envs.TrivialClusterEnv({"recording": rec})
    obs, _ = env.reset()
    acted: set[str] = set()
    steps = 0
    while True:
        acted |= set(obs)
        obs, rew, term, trunc, _ = env.step({aid: 0 for aid in obs})
        steps += 1
        if trunc["__all__"]:
            break
    assert steps == len(rec["obs"]) - 1
    assert acted <= set(obs), f"agents that acted but get no final observation: {acted - set(obs)}"
    assert set(obs) == set(rec["agents"]) and all(trunc[a] for a in obs) and not term["__all__"]


def test_single_floor_env_has_the_real_episode_length():
    rec = trivial_envs.record_single({"task_id": "static_workload", "episode_windows": 5})
    env = trivial_envs.TrivialSingleEnv({"recording": rec})
    env.reset(seed=0)
    n, done = 0, False
    while not done:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        n, done = n + 1, term or trunc
    assert n == 5
