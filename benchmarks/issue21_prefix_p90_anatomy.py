"""Where p90 TTFT comes from on a prefix task, and whether per-replica knob moves are worth anything as rules
(issue 21, eleventh session).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_prefix_p90_anatomy.py misses --seed 1000 --episodes 4
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_prefix_p90_anatomy.py moves --seed 0 --episodes 12

``misses``: per seed, under ``best_static_knobs``, the share of requests by cache outcome (``hit``: at most
1,000 prompt tokens prefilled; misses: the first request of its prefix in the episode (``first``), a prefix
seen before only on other replicas (``elsewhere``), one seen on this replica before (``evicted_here``)) and
their mean TTFT. ``moves``: the per-replica knob moves the per-replica lookahead ceiling picked
(``cluster_replica_ceiling.py``) played as static rules, paired with ``best_static_knobs`` (p90 relative
change ± 95 % half-width, seeds lower, throughput, grade).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from cluster_replica_ceiling import PerReplicaKnobs  # noqa: E402
from cluster_window_ceiling import _score  # noqa: E402
from inferencegym.envs.cluster_env import ClusterEnv  # noqa: E402
from inferencegym.envs.cluster_spaces import KNOB_BUCKETS, nearest_bucket  # noqa: E402
from inferencegym.evaluation.paired import ci95  # noqa: E402
from inferencegym.policies.knob_rules import KNOB_NAMES, base_knobs  # noqa: E402
from inferencegym.policies.routers import get_router_policy  # noqa: E402

TASK = "cluster_prefix_sharing"


def play(idx_by: dict, seed: int, keep_env: bool = False):
    env = ClusterEnv({"task_id": TASK})
    p = PerReplicaKnobs(get_router_policy("estimated_ttft"), idx_by, "x").bind(env)
    p.reset(seed)
    obs, infos = env.reset(seed=seed)
    while True:
        obs, _, term, trunc, infos = env.step(p.act_all(obs, infos))
        if term["__all__"] or trunc["__all__"]:
            return (_score(env, seed), env) if keep_env else _score(env, seed)


def _base_idx(env: ClusterEnv) -> tuple[int, ...]:
    kn = base_knobs(env.task)
    return tuple(nearest_bucket(b, kn[n]) for n, b in zip(KNOB_NAMES, KNOB_BUCKETS))


def misses(seeds: list[int]) -> None:
    env0 = ClusterEnv({"task_id": TASK})
    base = {a: _base_idx(env0) for a in env0.replica_ids}
    for seed in seeds:
        _, env = play(base, seed, keep_env=True)
        seen_any, seen_on = set(), {}
        kinds = {"hit": [], "first": [], "elsewhere": [], "evicted_here": []}
        for r in sorted(env.requests, key=lambda r: r.arrival_s):
            h = r.block_hashes[0] if r.block_hashes else None
            if r.prompt_tokens - r.cached_tokens <= 1000:
                k = "hit"
            elif h not in seen_any:
                k = "first"
            elif r.replica_id not in seen_on.get(h, set()):
                k = "elsewhere"
            else:
                k = "evicted_here"
            kinds[k].append(r.first_token_s - r.arrival_s)
            if h is not None:
                seen_any.add(h)
                seen_on.setdefault(h, set()).add(r.replica_id)
        n = sum(len(v) for v in kinds.values())
        print(f"seed {seed}: {n} requests; " + "; ".join(
            f"{k} {len(v) / n:.1%} (TTFT {np.mean(v):.3f} s)" for k, v in kinds.items() if v), flush=True)


def moves(seeds: list[int]) -> None:
    env0 = ClusterEnv({"task_id": TASK})
    b = _base_idx(env0)
    spec = lambda i: tuple(i if k == 2 else v for k, v in enumerate(b))  # noqa: E731 (speculation bucket i)
    cap = lambda i: tuple(i if k == 0 else v for k, v in enumerate(b))  # noqa: E731 (batch-cap bucket i)
    variants = {"replica 0 speculation 0": {0: spec(0)}, "replicas 0-1 speculation 0": {0: spec(0), 1: spec(0)},
                "all speculation 0": {i: spec(0) for i in range(4)}, "replica 0 speculation 4": {0: spec(2)},
                "replica 0 cap 32": {0: cap(1)}, "all cap 32": {i: cap(1) for i in range(4)}}
    ids = env0.replica_ids
    ref = [play({a: b for a in ids}, s) for s in seeds]
    for name, ch in variants.items():
        got = [play({a: ch.get(i, b) for i, a in enumerate(ids)}, s) for s in seeds]
        rp = [x["p90"] / y["p90"] - 1 for x, y in zip(got, ref)]
        print(f"{name:28s} p90 {np.mean(rp):+.1%} ± {ci95(rp):.1%} (lower on {sum(v < 0 for v in rp)}/{len(rp)}); "
              f"throughput {np.mean([x['thr'] / y['thr'] - 1 for x, y in zip(got, ref)]):+.2%}; "
              f"grade {np.mean([x['grade'] - y['grade'] for x, y in zip(got, ref)]):+.4f}", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("misses", "moves"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--episodes", type=int, default=4)
    args = ap.parse_args(argv)
    seeds = list(range(args.seed, args.seed + args.episodes))
    (misses if args.what == "misses" else moves)(seeds)


if __name__ == "__main__":
    main()
