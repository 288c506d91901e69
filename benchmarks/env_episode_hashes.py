"""Hashes of whole seeded env episodes, to compare two trees (a speed change must keep them).

    PYTHONPATH=/tmp/before .venv/bin/python -P benchmarks/env_episode_hashes.py /tmp/before.json
    PYTHONPATH=$PWD        .venv/bin/python -P benchmarks/env_episode_hashes.py /tmp/after.json
    python3 -c "import json; a, b = (json.load(open(f)) for f in ('/tmp/before.json', '/tmp/after.json')); print([k for k in a if a[k] != b[k]] or 'all same')"

Per single-agent task and shipped non-LLM baseline (``clairvoyant`` with ``privileged=True``): one
hash over seeds 0 and 1, every step's observation, reward and info (floats as ``float.hex``, arrays
as bytes) and the episode metrics; per replica count (4, 32) of ``cluster_routing``: 4,000 steps of
a round-robin router (replica agents keep their knobs). Longer than ``sim_digest.py``'s episodes
(whole 200-window episodes, two seeds, every baseline), slower (~1-2 CPU min), not recorded: it
compares trees. ``-P`` keeps the script's folder off ``sys.path`` (the tree under test is the only
``inferencegym``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from typing import Any

import numpy as np

from inferencegym.envs.cluster_env import ClusterEnv
from inferencegym.envs.serve_env import LLMServeEnv
from inferencegym.evaluation.single import to_env_action
from inferencegym.policies import get_policy, is_privileged

TASKS = ("static_workload", "bursty_workload", "adversarial_multitenant")
BASELINES = ("static_default", "heuristic", "random", "best_static", "phase_rule", "clairvoyant")
SEEDS = (0, 1)
CLUSTER_STEPS = 4000


def _add(h: Any, x: Any) -> None:
    """Feed ``x`` into the hash: dicts by sorted key, sequences in order, arrays as dtype + bytes,
    floats as ``float.hex``."""
    if isinstance(x, dict):
        for k in sorted(x, key=str):
            h.update(str(k).encode())
            _add(h, x[k])
    elif isinstance(x, (list, tuple)):
        h.update(b"[")
        for v in x:
            _add(h, v)
        h.update(b"]")
    elif isinstance(x, np.ndarray):
        h.update(str(x.dtype).encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, (bool, np.bool_)):
        h.update(b"T" if x else b"F")
    elif isinstance(x, (int, np.integer)):
        h.update(b"i" + str(int(x)).encode())
    elif isinstance(x, (float, np.floating)):
        h.update(float(x).hex().encode())
    else:
        h.update(repr(x).encode())


def single_hash(task: str, policy: str) -> str:
    env = LLMServeEnv(task, privileged=is_privileged(policy))
    pol = get_policy(policy, task)
    h = hashlib.sha256()
    for seed in SEEDS:
        if hasattr(pol, "reset"):
            pol.reset(seed=seed)
        obs, info = env.reset(seed=seed)
        _add(h, (obs, info))
        while True:
            obs, r, term, trunc, info = env.step(to_env_action(pol.act(obs, info)))
            _add(h, (obs, r, info))
            if term or trunc:
                break
        _add(h, env.episode_metrics())
    return h.hexdigest()[:16]


def cluster_hash(n: int) -> str:
    env = ClusterEnv({"task_id": "cluster_routing", "num_replicas": n})
    h = hashlib.sha256()
    obs, infos = env.reset(seed=3)
    _add(h, (obs, infos))
    nxt = 0
    for _ in range(CLUSTER_STEPS):
        act: dict = {}
        if env.pending_request is not None:  # round robin over the unmasked replicas
            mask = obs["router"]["action_mask"]
            i = nxt
            while mask[i] < 0.5:
                i = (i + 1) % n
            nxt = (i + 1) % n
            act["router"] = i
        else:
            for aid in env.replica_ids:
                act[aid] = infos[aid]["knobs"]
        obs, rew, term, trunc, infos = env.step(act)
        _add(h, (obs, rew, infos))
        if trunc["__all__"]:
            break
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", help="write the hashes to this JSON file")
    args = ap.parse_args()
    out = {f"{t}/{p}": single_hash(t, p) for t in TASKS for p in BASELINES}
    out.update({f"cluster_routing/{n}": cluster_hash(n) for n in (4, 32)})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
