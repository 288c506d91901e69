"""Run router / replica policies on cluster tasks and aggregate over seeds.

``evaluate_cluster_policy(spec, task_id, episodes=N, seed=S)`` returns the same JSON shape as the
single-agent evaluation (``policy, task, episodes, seeds, score_mean, score_ci95, ttft_p99_s,
tbt_p99_s, e2e_p99_s, throughput_tok_s, cost_per_1k_tokens``) plus cluster keys (``ttft_p99_ci95``,
``slo_attainment`` per tenant, ``load_imbalance``, ``router_decisions``, per-seed values). Episodes
use seeds S, S+1, ...; the policy is reset with the episode's seed.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.policies import get_policy
from inferencegym.policies.routers import ClusterPolicy, StaticReplica, get_cluster_policy
from inferencegym.tasks.cluster_grading import grade_cluster
from inferencegym.tasks.graders import EpisodeLog

from inferencegym.evaluation.paired import ci95  # (also imported from here by benchmarks and rl.pipeline)


def _as_cluster_policy(policy: Any):
    if isinstance(policy, str):
        return get_cluster_policy(policy)
    if hasattr(policy, "act_all"):
        return policy
    if hasattr(policy, "act"):  # a router-only policy (e.g. a trained router module)
        return ClusterPolicy(policy, StaticReplica(), name=getattr(policy, "name", "router"))
    raise TypeError(f"expected a policy spec or an object with act()/act_all(), got {type(policy).__name__}")


def run_cluster_episode(task_id: Any, policy: Any, seed: int, *, num_replicas: int | None = None,
                        episode_windows: int | None = None) -> tuple[EpisodeLog, dict[str, Any]]:
    """One episode of ``task_id`` (a registered id or a ``TaskSpec``); returns the grader's log
    (metrics included) and run statistics (router decisions, wall time, returns per agent, the
    prefix-cache hit rate by tier)."""
    pol = _as_cluster_policy(policy)
    cfg: dict[str, Any] = {"task_id": task_id}
    if num_replicas is not None:
        cfg["num_replicas"] = num_replicas
    if episode_windows is not None:
        cfg["episode_windows"] = episode_windows
    env = ClusterEnv(cfg)
    if hasattr(pol, "bind"):
        pol.bind(env)
    if hasattr(pol, "reset"):
        pol.reset(seed)
    t0 = time.perf_counter()
    obs, infos = env.reset(seed=seed)
    ret = {a: 0.0 for a in env.possible_agents}
    while True:
        actions = pol.act_all(obs, infos)
        obs, rew, term, trunc, infos = env.step(actions)
        for a, r in rew.items():
            ret[a] += r
        if term["__all__"] or trunc["__all__"]:
            break
    wall = time.perf_counter() - t0
    log = env.episode_log(policy=getattr(pol, "name", str(policy)), seed=seed)
    stats = {"router_decisions": env.decisions, "wall_s": wall, "returns": ret,
             "prefix_hit_rate_by_tier": env.cluster.prefix_hit_rate_by_tier()}
    return log, stats


def evaluate_cluster_policy(spec: Any, task_id: str, *, episodes: int = 5, seed: int = 0,
                            num_replicas: int | None = None, episode_windows: int | None = None,
                            progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Evaluate a cluster policy on ``episodes`` seeds S, S+1, ... (see the module docstring)."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1; got {episodes}")
    if isinstance(spec, str) and spec.startswith(("checkpoint:", "pretrained:", "http://", "https://")):
        spec = get_policy(spec, task_id if isinstance(task_id, str) else task_id.task_id)
    seeds = [seed + i for i in range(episodes)]
    scores, ttft, tbt, e2e, thr, imb, dec, cost, share, ret = [], [], [], [], [], [], [], [], [], []
    ttft90: list[float] = []
    att: dict[str, list[float]] = {}
    name = spec if isinstance(spec, str) else getattr(spec, "name", type(spec).__name__)
    task_name = task_id if isinstance(task_id, str) else task_id.task_id
    for i, s in enumerate(seeds):
        log, st = run_cluster_episode(task_id, spec, s, num_replicas=num_replicas,
                                      episode_windows=episode_windows)
        g = grade_cluster(task_id, log)
        m = log.metrics
        scores.append(g.score)
        ttft.append(m["cluster/ttft_p99_s"])
        ttft90.append(m["cluster/ttft_p90_s"])
        tbt.append(m["cluster/tbt_p99_s"])
        e2e.append(m["cluster/e2e_p99_s"])
        thr.append(m["cluster/throughput_tok_s"])
        imb.append(m["cluster/load_imbalance"])
        dec.append(st["router_decisions"])
        cost.append(m["cluster/cost_per_1k_tokens"])
        share.append(g.slo_share)
        ret.append(st["returns"]["router"])
        for k, v in m.items():
            if k.startswith("cluster/slo_attainment/"):
                att.setdefault(k.rsplit("/", 1)[1], []).append(v)
        if progress is not None:
            progress(i + 1)
    mean = lambda a: float(np.mean(a)) if a else math.nan  # noqa: E731
    return {
        "policy": name, "task": task_name, "episodes": episodes, "seeds": seeds,
        "score_mean": mean(scores), "score_ci95": ci95(scores),
        "ttft_p99_s": mean(ttft), "ttft_p99_ci95": ci95(ttft), "ttft_p90_s": mean(ttft90),
        "tbt_p99_s": mean(tbt), "e2e_p99_s": mean(e2e), "e2e_p99_ci95": ci95(e2e),
        "throughput_tok_s": mean(thr), "cost_per_1k_tokens": mean(cost),
        "slo_share_mean": mean(share), "scores": scores, "reward_mean": mean(ret),
        "kind": "cluster",
        "slo_attainment": {k: mean(v) for k, v in att.items()},
        "load_imbalance": mean(imb), "router_decisions": mean(dec),
        "per_seed": {"score": scores, "ttft_p99_s": ttft, "ttft_p90_s": ttft90, "e2e_p99_s": e2e},
    }
