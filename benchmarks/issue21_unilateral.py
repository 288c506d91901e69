"""What one replica gains by changing one knob alone (issue 21, fifth session): on exact env copies
(``copy.deepcopy``) of ``cluster_prefix_sharing`` with the ``estimated_ttft`` router inside and every
replica holding its knobs, replica k switches one knob at window w and holds it to the end; the
difference to the unswitched episode (common random numbers) is measured either as the replica
reward components (discounted 0.95; its own and summed over all replicas) or as the episode grade.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_unilateral.py --measure reward --seeds 500 501 502 --windows 5 20 35
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_unilateral.py --measure grade --seeds 500 501 --windows 5 20
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_unilateral.py --measure together --seeds 500 501 502 503

``together``: every replica on the switched knob from the start (fixed knobs, the
``best_static_knobs`` evaluation), mean grade and p90 TTFT on the seeds.
"""

from __future__ import annotations

import argparse
import copy
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

SWITCHES = (("batch_cap 32", 0, 1), ("speculation 2", 2, 1), ("chunk 2048", 3, 3))
COMPS = ("throughput", "slo", "preemption", "shared")
TASK = "cluster_prefix_sharing"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measure", choices=("reward", "grade", "together"), required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[500, 501])
    ap.add_argument("--windows", type=int, nargs="+", default=[5, 20])
    args = ap.parse_args()

    import numpy as np

    from inferencegym.rl.env_creators import make_cluster_env
    from inferencegym.tasks.cluster_grading import grade_cluster

    def rollout(e, info, obs, switch=None):
        acc, t, done = {}, 0, False
        while not done:
            act = {}
            for k in obs:
                a = np.asarray(info[k]["knobs"]).copy()
                if switch and k == switch[0]:
                    a[switch[1]] = switch[2]
                act[k] = a
            obs, _, te, tr, info = e.step(act)
            for k, i in info.items():
                acc.setdefault(k, np.zeros(len(COMPS)))
                acc[k] += 0.95 ** t * np.array([i["reward/" + c] for c in COMPS])
            t, done = t + 1, te["__all__"] or tr["__all__"]
        log = e.episode_log()
        return acc, grade_cluster(TASK, log).score, log.metrics["cluster/ttft_p90_s"]

    if args.measure == "together":
        from inferencegym.evaluation.search_cluster_knobs import _score

        base = {"batch_cap": 16, "kv_budget_fraction": 0.85, "speculation_depth": 0, "chunk_size": 512}
        for name, kn in (("initial knobs", base), ("batch_cap 32", {**base, "batch_cap": 32}),
                         ("speculation 2", {**base, "speculation_depth": 2}), ("chunk 2048", {**base, "chunk_size": 2048}),
                         ("best_static_knobs", {"batch_cap": 16, "kv_budget_fraction": 1.0, "speculation_depth": 2,
                                                "chunk_size": 2048})):
            g, p90 = _score(TASK, kn, list(args.seeds))
            print(f"{name:18s} grade {g:.4f}  p90 TTFT {-p90:.4f} s")
        return
    res: dict[str, list] = {}
    for s in args.seeds:
        env = make_cluster_env({"task_id": TASK, "internal_router": "estimated_ttft"})
        obs, info = env.reset(seed=s)
        for w in range(max(args.windows) + 1):
            if w in args.windows:
                base = rollout(copy.deepcopy(env), copy.deepcopy(info), copy.deepcopy(obs))
                for name, knob, idx in SWITCHES:
                    for rid in obs:
                        x = rollout(copy.deepcopy(env), copy.deepcopy(info), copy.deepcopy(obs), (rid, knob, idx))
                        if args.measure == "reward":
                            row = np.concatenate([x[0][rid] - base[0][rid], sum(x[0].values()) - sum(base[0].values())])
                        else:
                            row = np.array([x[1] - base[1], x[2] - base[2]])
                        res.setdefault(name, []).append(row)
            obs, _, _, _, info = env.step({k: np.asarray(info[k]["knobs"]) for k in obs})
    for name, rows in res.items():
        v = np.asarray(rows)
        if args.measure == "reward":
            print(f"{name:14s} n={len(v)}  own {dict(zip(COMPS, v[:, :4].mean(0).round(3)))}  "
                  f"summed over replicas {dict(zip(COMPS, v[:, 4:].mean(0).round(3)))}")
        else:
            print(f"{name:14s} n={len(v)}  grade {v[:, 0].mean():+.4f} (sd {v[:, 0].std():.4f}, higher on "
                  f"{int((v[:, 0] > 0).sum())})  p90 TTFT {v[:, 1].mean():+.4f} s")


if __name__ == "__main__":
    main()
