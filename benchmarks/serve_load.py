"""Load benchmark of the policy endpoint (Ray Serve) on 127.0.0.1.

Deploys a policy (by default a freshly built MLP module on the single-agent env's spaces, the size
of a trained one; or ``--policy checkpoint:PATH``), then sends ``--requests`` POST /act requests
(one real env observation each) from ``--clients`` concurrent keep-alive clients (aiohttp, one
process) and reports throughput, p50/p90/p99 latency and the error count. Each ``--max-batch-size``
given is deployed and measured in turn, in the same run (so ``--max-batch-size 64 1`` compares
Serve batching on and off side by side). Prints one JSON object per configuration.

    python benchmarks/serve_load.py --requests 10000 --clients 8 --max-batch-size 64 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import numpy as np  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _observations(task: str, n: int, seed: int = 0) -> list[list[float]]:
    from inferencegym.rl.env_creators import make_single_env

    env = make_single_env({"task_id": task})
    obs, _ = env.reset(seed=seed)
    out = [obs.tolist()]
    while len(out) < n:
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        out.append(obs.tolist())
        if term or trunc:
            obs, _ = env.reset()
    return out


def _tree_cpu_s(root: int) -> float:
    """User + system CPU seconds of ``root`` and all its descendants (Ray's gcs, raylet, the Serve
    proxy and replica are children of this driver), read from /proc. Linux only."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(d)] = int(fields[1])
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in tree]
        tree.update(kids)
        frontier.extend(kids)
    return sum(cpu.get(p, 0.0) for p in tree)


def _tiny_checkpoint(task: str, path: str) -> str:
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.env_creators import make_single_env
    from inferencegym.rl.modules import MLPModule

    env = make_single_env({"task_id": task})
    torch.manual_seed(0)
    RLModuleSpec(module_class=MLPModule, observation_space=env.observation_space,
                 action_space=env.action_space, model_config={"hidden": [64, 64]}).build().save_to_path(path)
    return f"checkpoint:{path}"


async def _load(url: str, bodies: list[bytes], clients: int) -> tuple[list[float], int, float]:
    import aiohttp

    latencies: list[float] = []
    errors = 0
    queue = iter(range(len(bodies)))

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        for i in queue:
            t0 = time.perf_counter()
            try:
                async with session.post(url, data=bodies[i], headers={"content-type": "application/json"}) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
            except aiohttp.ClientError:
                errors += 1
            latencies.append(time.perf_counter() - t0)

    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        wall = time.perf_counter() - t0
    return latencies, errors, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--task", default="bursty_workload")
    ap.add_argument("--policy", default=None, help="checkpoint:PATH (default: a fresh 64x64 MLP module)")
    ap.add_argument("--max-batch-size", type=int, nargs="+", default=[64])
    ap.add_argument("--batch-wait-ms", type=float, default=2.0)
    ap.add_argument("--num-cpus", type=float, default=1.0, help="CPUs of the policy replica")
    ap.add_argument("--obs-per-request", type=int, default=1,
                    help="observations per POST /act (>1 sends {'observations': [...]})")
    ap.add_argument("--idle-s", type=float, default=10.0, help="seconds to measure background CPU use")
    args = ap.parse_args(argv)

    import ray
    from ray import serve

    from inferencegym.apps.policy_endpoint.app import run_server

    tmp = tempfile.mkdtemp(prefix="serve_load_")
    policy = args.policy or _tiny_checkpoint(args.task, os.path.join(tmp, "module"))
    obs = _observations(args.task, 512)
    k = args.obs_per_request
    if k == 1:
        bodies = [json.dumps({"observation": obs[i % len(obs)]}).encode() for i in range(args.requests)]
    else:
        bodies = [json.dumps({"observations": [obs[(i * k + j) % len(obs)] for j in range(k)]}).encode()
                  for i in range(args.requests)]
    warm = bodies[: args.warmup]
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        for mbs in args.max_batch_size:
            port = _free_port()
            run_server(policy, task_id=args.task, port=port, max_batch_size=mbs,
                       batch_wait_timeout_s=args.batch_wait_ms / 1000.0 if mbs > 1 else 0.0,
                       num_cpus=args.num_cpus)
            url = f"http://127.0.0.1:{port}/act"
            asyncio.run(_load(url, warm, args.clients))
            idle0, t_idle = _tree_cpu_s(os.getpid()), time.perf_counter()
            time.sleep(args.idle_s)  # Ray's and Serve's background CPU use, without requests
            idle_rate = (_tree_cpu_s(os.getpid()) - idle0) / (time.perf_counter() - t_idle)
            cpu0 = _tree_cpu_s(os.getpid())
            lat, errors, wall = asyncio.run(_load(url, bodies, args.clients))
            cpu_total = _tree_cpu_s(os.getpid()) - cpu0
            cpu_ms = cpu_total * 1000.0 / len(bodies)
            cpu_ms_net = max(cpu_total - idle_rate * wall, 0.0) * 1000.0 / len(bodies)
            ms = np.asarray(lat) * 1000.0
            print(json.dumps({
                "requests": len(bodies), "clients": args.clients, "max_batch_size": mbs,
                "obs_per_request": k, "observations_per_s": round(k * len(bodies) / wall, 1),
                "batch_wait_ms": args.batch_wait_ms if mbs > 1 else 0.0,
                "throughput_req_s": round(len(bodies) / wall, 1), "wall_s": round(wall, 2),
                "latency_ms": {"p50": round(float(np.percentile(ms, 50)), 2),
                               "p90": round(float(np.percentile(ms, 90)), 2),
                               "p99": round(float(np.percentile(ms, 99)), 2),
                               "max": round(float(ms.max()), 2)},
                "errors": errors, "loadavg_1m": round(os.getloadavg()[0], 2),
                # CPU time per request of this process tree (client, Serve proxy and replica, Ray's
                # processes); "net" subtracts the tree's background rate measured without requests.
                # 2 cores / net = a rough ceiling for 2 idle cores (contention inflates CPU time too).
                "cpu_ms_per_request": round(cpu_ms, 3),
                "background_cpu_cores": round(idle_rate, 3),
                "cpu_ms_per_request_net": round(cpu_ms_net, 3),
                "est_req_s_on_2_idle_cores": round(2000.0 / cpu_ms_net, 1) if cpu_ms_net > 0 else None,
                "policy": "fresh MLP 64x64" if args.policy is None else args.policy,
            }), flush=True)
            serve.shutdown()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
