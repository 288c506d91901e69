"""Speed of the cluster environment on one core, without RLlib.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cluster_env_speed.py [--replicas 4,8,16,32]
        [--task cluster_routing] [--decisions 20000] [--repeats 3] [--json]

For each replica count a plain Python loop drives the env (a round-robin router reading the
observation's action mask; replica agents send back their current knobs) until ``--decisions``
router decisions are made (episodes are chained with seeds 0, 1, ...). Reported per replica count,
median over ``--repeats``:

- ``router_decisions_per_cpu_s``: router decisions per second of the process's CPU time
  (``time.process_time``) for the whole loop (simulator, features, rewards, dict building, policy):
  the one-core figure, robust to other processes sharing the machine; ``router_decisions_per_s``
  is the same per wall second;
- ``cpu_us_per_decision`` and its ratio to the first replica count (how the cost grows with N);
- ``replica_steps_per_cpu_s``: replica-agent steps (one agent acting at one window boundary) per
  CPU second of the same loop.

The per-replica load is the same at every N (the task's arrival rate scales with its capacity), so
router decisions per simulated second grow with N while the per-replica queues stay alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from inferencegym.envs.cluster_env import ClusterEnv  # noqa: E402


def run(task: str, n: int, decisions: int, seed: int) -> dict:
    env = ClusterEnv({"task_id": task, "num_replicas": n})
    made = windows = 0
    nxt = 0
    episode = 0
    obs, infos = env.reset(seed=seed)
    t0 = time.perf_counter()
    c0 = time.process_time()
    while made < decisions:
        act = {}
        if env.pending_request is not None:
            mask = obs["router"]["action_mask"]
            i = nxt
            while mask[i] < 0.5:
                i = (i + 1) % n
            nxt = (i + 1) % n
            act["router"] = i
            made += 1
        else:
            windows += 1
            for aid in env.replica_ids:
                act[aid] = infos[aid]["knobs"]
        obs, rew, term, trunc, infos = env.step(act)
        if trunc["__all__"]:
            episode += 1
            obs, infos = env.reset(seed=seed + episode)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"replicas": n, "decisions": made, "windows": windows, "wall_s": wall, "cpu_s": cpu,
            "router_decisions_per_s": made / wall, "us_per_decision": 1e6 * wall / made,
            "replica_steps_per_s": windows * n / wall, "episodes": episode,
            "router_decisions_per_cpu_s": made / cpu, "cpu_us_per_decision": 1e6 * cpu / made,
            "replica_steps_per_cpu_s": windows * n / cpu}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="cluster env speed (one core, no RLlib)")
    ap.add_argument("--replicas", default="4,32")
    ap.add_argument("--task", default="cluster_routing")
    ap.add_argument("--decisions", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for n in [int(x) for x in args.replicas.split(",")]:
        runs = [run(args.task, n, args.decisions, seed=100 * rep) for rep in range(args.repeats)]
        med = {k: statistics.median(r[k] for r in runs) for k in
               ("router_decisions_per_s", "us_per_decision", "replica_steps_per_s", "wall_s", "cpu_s",
                "router_decisions_per_cpu_s", "cpu_us_per_decision", "replica_steps_per_cpu_s")}
        rows.append({"task": args.task, "replicas": n, "repeats": args.repeats,
                     "decisions": args.decisions, **med})
    base = rows[0]
    for r in rows:
        r["cost_ratio_vs_first"] = r["cpu_us_per_decision"] / base["cpu_us_per_decision"]
        r["replica_ratio_vs_first"] = r["replicas"] / base["replicas"]
        if args.json:
            print(json.dumps(r))
        else:
            print(f"{r['task']} N={r['replicas']:>3}: {r['router_decisions_per_cpu_s']:7.0f} router "
                  f"decisions per CPU-s ({r['cpu_us_per_decision']:.0f} us each; x{r['cost_ratio_vs_first']:.2f} "
                  f"for x{r['replica_ratio_vs_first']:.0f} replicas), {r['replica_steps_per_cpu_s']:7.0f} "
                  f"replica steps per CPU-s; wall: {r['router_decisions_per_s']:.0f} decisions/s "
                  f"(median of {r['repeats']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
