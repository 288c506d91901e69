"""The control plane as agents (issue 22 item 4): the autoscaler, the admission controller, the router
and the replica agents of ``ControlClusterEnv``; replica agents come and go with the lifecycle."""

from __future__ import annotations

import numpy as np
import pytest

from inferencegym.envs.control_cluster_env import ControlClusterEnv
from inferencegym.sim.lifecycle import DRAINING, UP

# deterministic start-up: 20 s provisioning + loading (70B weights at 20 GB/s: ~7 s) + 3 s warm-up
FAST = {"provision_mean_s": 20.0, "provision_std_s": 0.0, "warmup_s": 3.0, "load_bandwidth_gb_s": 20.0,
        "initial_replicas": 1, "max_replicas": 4}


def _env(**over) -> ControlClusterEnv:
    cfg = {"task_id": "cluster_autoscaling", "episode_s": 150.0, "split": "test", "lifecycle": FAST,
           "replica_window_s": 5.0, **over}
    return ControlClusterEnv(cfg)


def _play(env, target_at, seed=1):
    """Run an episode: the autoscaler's target from ``target_at(t_s)``, the router picks the
    unmasked slot with the fewest outstanding requests, replica agents keep their knobs. Returns
    the (time, agents) of every step, the router's choices as (time, slot), the final infos and
    the per-agent returns."""
    obs, infos = env.reset(seed=seed)
    log, routed, ret = [], [], {}
    while True:
        t = env.fleet.now_s
        log.append((t, set(obs)))
        act = {}
        for aid, o in obs.items():
            if aid == "autoscaler":
                act[aid] = target_at(t)
            elif aid == "admission":
                act[aid] = 0
            elif aid == "router":
                act[aid] = int(np.argmin(o["replicas"][:, 6] + 1e9 * (1 - o["action_mask"])))
                routed.append((t, act[aid]))
            else:
                act[aid] = np.asarray(o[-4:] * np.array([4, 3, 2, 3]), dtype=np.int64).round()
        obs, rew, terms, truncs, infos = env.step(act)
        for a, r in rew.items():
            ret[a] = ret.get(a, 0.0) + r
        if truncs["__all__"]:
            return log, routed, infos, ret


def test_replica_agents_appear_only_after_provisioning_and_loading_and_leave_when_draining():
    env = _env()
    log, routed, infos, _ = _play(env, lambda t: 3 if t < 90 else 1)
    startup = 20.0 + env.fleet.lifecycle.load_s + 3.0
    assert env.fleet.lifecycle.load_s > 5.0
    replica_steps = [(t, {a for a in agents if a.startswith("replica_")}) for t, agents in log
                     if any(a.startswith("replica_") for a in agents)]
    # before the new replicas serve, only replica_0 is an agent; after, all three; after the scale-down, one
    assert all(ags == {"replica_0"} for t, ags in replica_steps if t < startup)
    assert any(ags == {"replica_0", "replica_1", "replica_2"} for t, ags in replica_steps if startup < t < 90)
    assert all(len(ags) == 1 for t, ags in replica_steps if t > 90 + 60 + 1)
    # the router never sent a request to a slot before it served
    assert not [(t, i) for t, i in routed if i > 0 and t < startup]
    assert any(i > 0 for t, i in routed if t > startup)
    ups = {i: t for t, i, s in env.fleet.lifecycle.log if s == "up" and t > 0}
    assert ups[1] == pytest.approx(startup) and ups[2] == pytest.approx(startup)


def test_a_draining_replica_gets_no_request_and_choosing_it_changes_nothing():
    env = _env(episode_s=120.0, lifecycle={**FAST, "initial_replicas": 2})
    obs, _ = env.reset(seed=2)
    drained_at, chosen = None, []
    while True:
        t = env.fleet.now_s
        act = {}
        for aid, o in obs.items():
            if aid == "autoscaler":
                act[aid] = 2 if t < 60 else 1
            elif aid == "router":
                lc = env.fleet.lifecycle
                draining = [i for i, s in enumerate(lc.state) if s == DRAINING]
                if draining:
                    drained_at = drained_at if drained_at is not None else t
                    assert o["action_mask"][draining].sum() == 0 and o["present"][draining].sum() == 0
                    n_before = len(env.fleet.cluster.replicas[draining[0]].waiting)
                    with pytest.raises(ValueError, match="not serving"):
                        env.step({"router": draining[0]})
                    assert len(env.fleet.cluster.replicas[draining[0]].waiting) == n_before
                act[aid] = int(np.argmin(o["replicas"][:, 6] + 1e9 * (1 - o["action_mask"])))
                assert env.fleet.lifecycle.state[act[aid]] == UP
                chosen.append(act[aid])
            else:
                act[aid] = np.zeros(4, dtype=np.int64) if aid.startswith("replica_") else 0
        obs, _, _, truncs, _ = env.step(act)
        if truncs["__all__"]:
            break
    assert drained_at is not None  # the scale-down drained a replica while requests arrived


def test_the_autoscaler_return_is_the_task_grade_minus_the_cost_weight():
    env = _env()
    _, _, infos, ret = _play(env, lambda t: 2)
    w = env.task.grade_cost_weight
    assert ret["autoscaler"] == pytest.approx(infos["autoscaler"]["score"] - w, abs=1e-9)
    assert infos["autoscaler"]["summary"]["gpu_hours"] > 0


def test_one_seed_gives_the_same_episode():
    a = _play(_env(), lambda t: 2, seed=5)
    b = _play(_env(), lambda t: 2, seed=5)
    assert a[1] == b[1] and a[2]["autoscaler"]["summary"] == b[2]["autoscaler"]["summary"]


def test_bad_actions_and_config_are_one_clear_error():
    with pytest.raises(ValueError, match="unknown ControlClusterEnv config keys"):
        ControlClusterEnv({"nope": 1})
    with pytest.raises(ValueError, match="fixed fleet"):
        ControlClusterEnv({"task_id": "cluster_admission", "autoscaler": "agent"})
    env = _env()
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"autoscaler"}
    with pytest.raises(ValueError, match="replica count in 0..4"):
        env.step({"autoscaler": 9})
    with pytest.raises(ValueError, match="missing"):
        env.step({})
    obs, *_ = env.step({"autoscaler": 1})  # still usable after the refusals
    assert obs


def test_a_crashed_replica_leaves_the_agent_set_and_its_requests_come_back_to_the_router():
    env = _env(episode_s=90.0, lifecycle={**FAST, "initial_replicas": 2, "crash_times_s": (40.0,)})
    log, routed, infos, _ = _play(env, lambda t: 2)
    f = env.fleet
    crash = [(t, i) for t, i, s in f.lifecycle.log if s == "crashed"]
    assert crash and crash[0][0] == pytest.approx(40.0, abs=1.0)
    t_c, slot = crash[0]
    rid = f"replica_{slot}"
    # gone from the agent set while its slot restarts (the autoscaler's target of 2 brings a new node)
    assert not any(rid in agents for t, agents in log if t_c + 1 < t < t_c + 20)
    assert not [i for t, i in routed if i == slot and t_c < t < t_c + 20]
    # its in-flight requests were retried: the router decided them again, and none is lost
    assert f.retries > 0 and len(routed) >= len(f.requests) - 5
    s = infos[next(iter(infos))]["summary"]
    assert s["crashes"] == 1 and s["arrivals"] == len(f.requests)
