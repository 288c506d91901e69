"""Behaviour digest of the simulator: one hash of seeded results per task, policy and scenario.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/sim_digest.py            # compare with the record
    PYTHONPATH=$PWD .venv/bin/python benchmarks/sim_digest.py --write    # re-record (say why in the commit)

A refactor of ``inferencegym/sim`` must keep every entry bit-identical; a change that moves
behaviour on purpose (a fixed defect, a new engine step) re-records the file and names the entries
that moved. ``tests/test_sim_digest.py`` runs the comparison.

Each entry hashes (SHA-256 over ``float.hex`` of every float) what an upper layer sees:

* ``single/TASK/POLICY``: every step's reward, observation and info scalars, then the grade and the
  episode metrics of one seeded episode (shortened to ``SINGLE_WINDOWS`` windows);
* ``cluster/TASK/ROUTER``: every step's rewards and observations of the cluster env, then the
  episode log's metrics (``CLUSTER_WINDOWS`` windows);
* ``simulate/NAME``: the per-request results table and the run statistics of a ``Cluster`` run
  (Poisson or prefix-sharing requests; disaggregation, priority, knob changes, schedulers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

RECORD = Path(__file__).resolve().parents[1] / "tests" / "sim_digest.json"
SINGLE_WINDOWS = 60
CLUSTER_WINDOWS = 12
SEED = 7


class _Hasher:
    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def add(self, x: Any) -> None:
        h = self.h
        if isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(str(k).encode())
                self.add(x[k])
        elif isinstance(x, (list, tuple)):
            h.update(b"[")
            for v in x:
                self.add(v)
            h.update(b"]")
        elif isinstance(x, np.ndarray):
            if x.dtype == object:
                self.add([str(v) for v in x.tolist()])
            else:
                h.update(str(x.dtype).encode())
                h.update(np.ascontiguousarray(x).tobytes())
        elif isinstance(x, (bool, np.bool_)):
            h.update(b"T" if x else b"F")
        elif isinstance(x, (int, np.integer)):
            h.update(b"i%d" % int(x))
        elif isinstance(x, (float, np.floating)):
            h.update(float(x).hex().encode())
        elif x is None:
            h.update(b"N")
        else:
            h.update(str(x).encode())

    def hexdigest(self) -> str:
        return self.h.hexdigest()[:16]


def _scalars(info: dict) -> dict:
    return {k: v for k, v in info.items()
            if isinstance(v, (int, float, bool, np.integer, np.floating, str))}


def single_digest(task: str, policy: str) -> str:
    from inferencegym.envs.serve_env import LLMServeEnv
    from inferencegym.evaluation.single import to_env_action
    from inferencegym.policies import get_policy

    pol = get_policy(policy, task)
    env = LLMServeEnv(task, episode_windows=SINGLE_WINDOWS, privileged=bool(getattr(pol, "privileged", False)))
    if hasattr(pol, "reset"):
        try:
            pol.reset(seed=SEED)
        except TypeError:
            pol.reset()
    h = _Hasher()
    obs, info = env.reset(seed=SEED)
    h.add(obs)
    while True:
        obs, r, term, trunc, info = env.step(to_env_action(pol.act(obs, info)))
        h.add([obs, r, term, trunc, _scalars(info)])
        if term or trunc:
            break
    g = env.grade()
    h.add([g.score, g.breakdown(), env.episode_metrics()])
    return h.hexdigest()


def cluster_digest(task: str, router: str) -> str:
    from inferencegym.envs.cluster_env import ClusterEnv
    from inferencegym.policies.routers import get_cluster_policy

    pol = get_cluster_policy(router)
    env = ClusterEnv({"task_id": task, "episode_windows": CLUSTER_WINDOWS})
    if hasattr(pol, "bind"):
        pol.bind(env)
    if hasattr(pol, "reset"):
        pol.reset(SEED)
    h = _Hasher()
    obs, infos = env.reset(seed=SEED)
    h.add(obs)
    while True:
        obs, rew, term, trunc, infos = env.step(pol.act_all(obs, infos))
        h.add([obs, rew, term, trunc])
        if term["__all__"] or trunc["__all__"]:
            break
    h.add([env.decisions, env.episode_log(policy=router, seed=SEED).metrics])
    return h.hexdigest()


def _poisson(rng, n_tenants=1, rate=12.0, dur=40.0, prompt=(16, 3000), output=(1, 400), prio=None):
    from inferencegym.sim import Request

    n = int(rng.poisson(rate * dur))
    t = np.sort(rng.uniform(0, dur, n))
    p = rng.integers(prompt[0], prompt[1] + 1, n)
    o = rng.integers(output[0], output[1] + 1, n)
    ten = rng.integers(0, n_tenants, n)
    return [Request(req_id=i, arrival_s=float(t[i]), prompt_tokens=int(p[i]), output_tokens=int(o[i]),
                    tenant=int(ten[i]), priority=int(prio is not None and ten[i] == prio))
            for i in range(n)]


def _prefix_requests(seed: int, preset: str, dur: float):
    from inferencegym.workload import default_prefix_spec, generate_prefix_workload

    wl = generate_prefix_workload(default_prefix_spec(preset), dur, np.random.default_rng(seed))
    return wl.to_requests()


def _scenarios() -> dict[str, Any]:
    from inferencegym.sim import ClusterConfig, ReplicaConfig, TenantSpec

    two = (TenantSpec(name="gold", priority=1, ttft_slo_s=1.0, tbt_slo_s=0.1),
           TenantSpec(name="bronze", priority=0, ttft_slo_s=4.0, tbt_slo_s=0.3, spec_acceptance=0.5))
    small = ReplicaConfig(model="llama-2-7b", gpu="a100-80gb", kv_budget_fraction=0.15)
    return {
        "vllm_lor_4": (ClusterConfig(replica=small, num_replicas=4, router="least_outstanding_requests"),
                       lambda rng: _poisson(rng, rate=30.0), None),
        "sarathi_p2c_priority": (ClusterConfig(replica=ReplicaConfig(scheduler="sarathi", kv_budget_fraction=0.1,
                                                                     speculation_depth=3),
                                               num_replicas=3, router="power_of_two_choices", tenants=two,
                                               priority_routing=True),
                                 lambda rng: _poisson(rng, n_tenants=2, rate=20.0, prio=0), None),
        "static_random": (ClusterConfig(replica=ReplicaConfig(scheduler="static", batch_cap=16), num_replicas=2,
                                        router="random"),
                          lambda rng: _poisson(rng, rate=6.0), None),
        "disagg_kv": (ClusterConfig(replica=small, num_replicas=4, router="least_kv_load", disaggregate=True,
                                    prefill_replicas=1),
                      lambda rng: _poisson(rng, rate=14.0), None),
        "knobs_clairvoyant": (ClusterConfig(replica=small, num_replicas=2, router="clairvoyant"),
                              lambda rng: _poisson(rng, rate=16.0), "knobs"),
        "prefix_llmd": (ClusterConfig(replica=ReplicaConfig(kv_budget_fraction=0.3), num_replicas=4,
                                      router="llmd_precise"),
                        lambda rng: _prefix_requests(3, "mooncake_shared_prefix", 40.0), None),
        "prefix_sglang_multiturn": (ClusterConfig(replica=ReplicaConfig(kv_budget_fraction=0.3), num_replicas=3,
                                                  router="sglang_cache_aware"),
                                    lambda rng: _prefix_requests(4, "mooncake_multiturn", 40.0), None),
        "prefix_dynamo_oracle": (ClusterConfig(replica=ReplicaConfig(kv_budget_fraction=0.3), num_replicas=2,
                                               router="prefix_oracle"),
                                 lambda rng: _prefix_requests(5, "mooncake_agent", 30.0), None),
    }


def simulate_digest(name: str) -> str:
    from inferencegym.sim import Cluster

    cfg, make, mode = _scenarios()[name]
    rng = np.random.default_rng(SEED)
    reqs = make(rng)
    c = Cluster(cfg, np.random.default_rng(SEED), check_invariants=False)
    c.submit(reqs)
    h = _Hasher()
    t = 0.0
    step = 2.0
    while c.n_completed + c.n_rejected < c.n_submitted and t < 400.0:
        t += step
        c.run_until(t)
        if mode == "knobs" and abs(t - 10.0) < 1e-9:
            h.add(c.apply_replica_config(None, quantization="int8", batch_cap=32))
        if mode == "knobs" and abs(t - 20.0) < 1e-9:
            h.add(c.apply_replica_config(1, scheduler="sarathi", kv_budget_fraction=0.08, speculation_depth=2))
        ws = c.window_stats(reset=True)
        h.add([ws.flat_metrics(), c.replica_features()])
    c.drain()
    h.add([c.results(), c.run_stats().flat_metrics(), c.n_completed, c.n_rejected])
    return h.hexdigest()


SINGLE_POLICIES = ("static_default", "heuristic", "random")
CLUSTER_ROUTERS = ("round_robin", "least_outstanding_requests", "random", "llmd_precise",
                   "estimated_ttft", "prefix_oracle")


def compute(only: str | None = None) -> dict[str, str]:
    from inferencegym.tasks import list_tasks

    out: dict[str, str] = {}
    for t in list_tasks(kind="single"):
        for p in SINGLE_POLICIES:
            k = f"single/{t.task_id}/{p}"
            if only is None or only in k:
                out[k] = single_digest(t.task_id, p)
    for t in list_tasks(kind="cluster"):
        for r in CLUSTER_ROUTERS:
            k = f"cluster/{t.task_id}/{r}"
            if only is None or only in k:
                out[k] = cluster_digest(t.task_id, r)
    for name in _scenarios():
        k = f"simulate/{name}"
        if only is None or only in k:
            out[k] = simulate_digest(name)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="re-record tests/sim_digest.json")
    ap.add_argument("--only", default=None, help="only entries whose key contains this text")
    args = ap.parse_args(argv)
    got = compute(args.only)
    rec = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    if args.write:
        new = dict(rec) if args.only else {}
        new.update(got)
        moved = sorted(k for k in got if rec.get(k) != got[k])
        tmp = RECORD.with_suffix(".tmp")
        tmp.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
        tmp.replace(RECORD)
        print(f"wrote {RECORD} ({len(new)} entries); moved: {', '.join(moved) or 'none'}")
        return 0
    bad = [k for k in got if rec.get(k) != got[k]]
    for k in sorted(got):
        print(f"{'MOVED' if k in bad else 'same '} {k} {got[k]} (recorded {rec.get(k)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
