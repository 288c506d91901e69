"""Per-window lookahead ceiling of the cluster tasks: router and replica knobs chosen per block of
control windows on exact env copies (issue 21, item 2/4).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/cluster_window_ceiling.py --task cluster_prefix_sharing \\
        --episodes 5 --seed 1000 --block 10 [--objective grade|p90] --json-out benchmarks/results/issue21/window_ceiling_prefix_sharing.json

A rollout algorithm over the best observable rule ``best_static_knobs`` (the ``estimated_ttft``
router with the searched fixed knobs): at every block of ``--block`` control windows each candidate
(router in ``estimated_ttft``, ``clairvoyant``, ``prefix_oracle`` on the prefix tasks) x (knobs in the
best static knobs and every one-bucket move of one knob, the same grid as
``cluster_ceiling_table.hindsight_joint``, on every replica) is played for the block on a
``copy.deepcopy`` of the env and its policies, then ``best_static_knobs`` to the end of the episode;
the best full-episode value is played and carried to the next block (so only the alternatives cost
a rollout). Unlike the static hindsight ceiling it may change router and knobs within an episode;
like it, it knows the future (privileged twice: it simulates the future and may route with true
output lengths / future arrivals). Objective ``grade``: the task's grade; ``p90``: the lowest p90
TTFT among candidates whose throughput stays within 1 % of ``best_static_knobs``'s on the seed.
Either way the incumbent is always a candidate, so the result is never worse than
``best_static_knobs`` on that objective and seed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from cluster_ceiling_table import is_prefix, knob_grid  # noqa: E402
from inferencegym.envs.cluster_env import ClusterEnv  # noqa: E402
from inferencegym.evaluation.cluster import ci95  # noqa: E402
from inferencegym.policies.routers import ClusterPolicy, FixedKnobsReplica, get_router_policy  # noqa: E402
from inferencegym.tasks.cluster_grading import grade_cluster  # noqa: E402
from inferencegym.tasks.spec import get_task  # noqa: E402


def _score(env: ClusterEnv, seed: int) -> dict:
    log = env.episode_log(policy="window_ceiling", seed=seed)
    m = log.metrics
    return {"grade": grade_cluster(env.task, log).score, "p90": m["cluster/ttft_p90_s"],
            "p99": m["cluster/ttft_p99_s"], "thr": m["cluster/throughput_tok_s"]}


def _play(env: ClusterEnv, obs: dict, infos: dict, first: ClusterPolicy, base: ClusterPolicy,
          windows: int, seed: int) -> dict:
    """``first`` for ``windows`` window ends, then ``base`` to the end; the episode's score."""
    pol, seen = first, 0
    while True:
        if "router" not in obs:  # the replica agents act: a window boundary
            if seen == windows:
                pol = base
            seen += 1
        obs, _, term, trunc, infos = env.step(pol.act_all(obs, infos))
        if term["__all__"] or trunc["__all__"]:
            return _score(env, seed)


def candidates(task_id: str) -> list[tuple[str, str, dict]]:
    routers = ["estimated_ttft", "clairvoyant"] + (["prefix_oracle"] if is_prefix(task_id) else [])
    return [(f"{r}@{json.dumps(k, sort_keys=True)}", r, k) for r in routers for k in knob_grid(get_task(task_id))]


def window_ceiling_episode(task_id: str, seed: int, *, block: int, objective: str = "grade",
                           episode_windows: int | None = None) -> dict:
    env = ClusterEnv({"task_id": task_id, "episode_windows": episode_windows})
    base = ClusterPolicy(get_router_policy("estimated_ttft"), FixedKnobsReplica(), name="best_static_knobs")
    cands = [ClusterPolicy(get_router_policy(r), FixedKnobsReplica(k), name=key) for key, r, k in candidates(task_id)]
    for p in (base, *cands):
        p.bind(env)
        p.reset(seed)
    obs, infos = env.reset(seed=seed)
    e, b = copy.deepcopy((env, base))
    ref = _play(e, obs, infos, b, b, 0, seed)  # best_static_knobs alone: the base and the incumbent
    floor = 0.99 * ref["thr"]

    def better(x: dict, y: dict) -> bool:
        if objective == "grade":
            return x["grade"] > y["grade"] + 1e-12
        return x["thr"] >= floor and x["p90"] < y["p90"] - 1e-12

    value, cur, windows, rollouts, choices = ref, base, 0, 1, []
    while True:
        if "router" not in obs:
            if windows % block == 0:
                best, cur = value, base
                for c in cands:
                    e, c2, b2 = copy.deepcopy((env, c, base))
                    v = _play(e, obs, infos, c2, b2, block, seed)
                    rollouts += 1
                    if better(v, best):
                        best, cur = v, c
                value = best
                choices.append(cur.name)
            windows += 1
        obs, _, term, trunc, infos = env.step(cur.act_all(obs, infos))
        if term["__all__"] or trunc["__all__"]:
            break
    got = _score(env, seed)
    return {"seed": seed, "base": ref, "ceiling": got, "predicted": value, "rollouts": rollouts,
            "choices": choices}


def ceiling_summary(eps: list[dict]) -> dict:
    """Paired ceiling - start over the episodes so far (each with ``base`` and ``ceiling`` scores): grade
    difference and p90 TTFT relative change (means ± 95 % half-widths), seeds with a higher grade, the
    lowest p90 change, the mean p90s."""
    dg = [x["ceiling"]["grade"] - x["base"]["grade"] for x in eps]
    rp = [x["ceiling"]["p90"] / x["base"]["p90"] - 1.0 for x in eps]
    return {"grade_diff_mean": float(np.mean(dg)), "grade_diff_ci95": ci95(dg),
            "grade_higher": sum(d > 1e-12 for d in dg), "p90_rel_mean": float(np.mean(rp)),
            "p90_rel_ci95": ci95(rp), "p90_rel_min": float(np.min(rp)), "n": len(eps),
            "p90_mean_base": float(np.mean([x["base"]["p90"] for x in eps])),
            "p90_mean_ceiling": float(np.mean([x["ceiling"]["p90"] for x in eps]))}


def write_atomic(path: Path, out: dict) -> None:
    """``out`` as JSON at ``path`` (a stopped run never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--block", type=int, default=10, help="control windows per decision")
    ap.add_argument("--objective", choices=("grade", "p90"), default="grade")
    ap.add_argument("--json-out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.seed < 1000:
        raise SystemExit(f"--seed must be >= 1000 (held-out seeds), got {args.seed}")
    out = {"task": args.task, "block": args.block, "objective": args.objective, "episodes": [],
           "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cluster_window_ceiling.py " + " ".join(sys.argv[1:])}
    ceiling_loop(out, range(args.seed, args.seed + args.episodes), args.json_out, args.task,
                 lambda s: window_ceiling_episode(args.task, s, block=args.block, objective=args.objective),
                 "best_static_knobs", "window ceiling")


def ceiling_loop(out: dict, seeds, json_out: Path, task: str, episode, start: str, ceiling: str) -> dict:
    """Run ``episode(seed)`` per seed into ``out["episodes"]``, print each seed's start and ceiling scores,
    keep ``out["paired"]`` (:func:`ceiling_summary`) and the JSON file current after every seed."""
    for s in seeds:
        t0 = time.time()
        ep = episode(s)
        ep["wall_s"] = round(time.time() - t0, 1)
        out["episodes"].append(ep)
        b, c = ep["base"], ep["ceiling"]
        print(f"{task} seed {s}: {start} grade {b['grade']:.4f} p90 {b['p90']:.4f} thr {b['thr']:.0f} | "
              f"{ceiling} grade {c['grade']:.4f} p90 {c['p90']:.4f} thr {c['thr']:.0f} "
              f"({ep['rollouts']} rollouts, {ep['wall_s']} s) {ep['choices']}", flush=True)
        out["paired"] = ceiling_summary(out["episodes"])
        write_atomic(json_out, out)
    p = out["paired"]
    print(f"{task}: {ceiling} - {start} grade {p['grade_diff_mean']:+.4f} ± {p['grade_diff_ci95']:.4f} "
          f"({p['grade_higher']}/{p['n']}); p90 {p['p90_rel_mean']:+.1%} ± {p['p90_rel_ci95']:.1%} "
          f"({p['p90_mean_base']:.4f} -> {p['p90_mean_ceiling']:.4f} s)")
    return out


if __name__ == "__main__":
    main()
