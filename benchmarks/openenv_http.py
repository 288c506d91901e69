"""OpenEnv server overhead: env step in process vs over HTTP (one session) vs WebSocket, and the
aggregate rate of several concurrent HTTP sessions. Server: uvicorn on 127.0.0.1 in a subprocess.

    python benchmarks/openenv_http.py [--steps 200] [--sessions 4] [--repeats 3]

Prints a Markdown table (medians over repeats) for docs/bench/openenv.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx

TASK = "bursty_workload"
ACTION = {"batch_cap": 64, "kv_budget_fraction": 0.85}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_process(steps: int) -> list[float]:
    from inferencegym.apps.env_server.environment import InferenceGymEnvironment

    env = InferenceGymEnvironment()
    env.reset(seed=0, task_id=TASK)
    lat = []
    for _ in range(steps):
        t = time.perf_counter()
        env.step(ACTION)
        lat.append(time.perf_counter() - t)
    return lat


def http_session(url: str, steps: int, seed: int = 0) -> list[float]:
    with httpx.Client(base_url=url, timeout=60) as c:
        sid = c.post("/reset", json={"seed": seed, "task_id": TASK}).json()["session_id"]
        lat = []
        for _ in range(steps):
            t = time.perf_counter()
            r = c.post("/step", json={"session_id": sid, "action": ACTION})
            lat.append(time.perf_counter() - t)
            r.raise_for_status()
        c.delete(f"/sessions/{sid}")
    return lat


def websocket(url: str, steps: int) -> list[float]:
    from inferencegym.apps.env_server.client import InferenceGymEnv

    lat = []
    with InferenceGymEnv(base_url=url) as env:
        env.reset(seed=0, task_id=TASK)
        for _ in range(steps):
            t = time.perf_counter()
            env.step(ACTION)
            lat.append(time.perf_counter() - t)
    return lat


def concurrent(url: str, steps: int, sessions: int) -> float:
    """Aggregate steps/s of ``sessions`` clients stepping their own sessions at once."""
    barrier = threading.Barrier(sessions + 1)

    def run(i: int) -> None:
        barrier.wait()
        http_session(url, steps, seed=i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return sessions * steps / (time.perf_counter() - t0)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    srv = subprocess.Popen([sys.executable, "-m", "inferencegym.apps.env_server.app", "--port", str(port)],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        rows: dict[str, list[tuple[float, float]]] = {"in process": [], "HTTP (1 session)": [],
                                                      "WebSocket (OpenEnv EnvClient)": []}
        rates = []
        for _ in range(args.repeats):
            for name, fn in (("in process", lambda: in_process(args.steps)),
                             ("HTTP (1 session)", lambda: http_session(url, args.steps)),
                             ("WebSocket (OpenEnv EnvClient)", lambda: websocket(url, args.steps))):
                lat = fn()
                rows[name].append((statistics.median(lat), pct(lat, 0.99)))
            rates.append(concurrent(url, args.steps, args.sessions))
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    print(f"task {TASK}, {args.steps} steps per run, median over {args.repeats} runs\n")
    print("| path | median step latency (ms) | p99 step latency (ms) | steps/s (1 client) |")
    print("|---|---:|---:|---:|")
    for name, vals in rows.items():
        med = statistics.median(v[0] for v in vals) * 1e3
        p99 = statistics.median(v[1] for v in vals) * 1e3
        print(f"| {name} | {med:.2f} | {p99:.2f} | {1e3 / med:.0f} |")
    print(f"\n{args.sessions} concurrent HTTP sessions: {statistics.median(rates):.0f} steps/s aggregate "
          f"(median of {args.repeats})")


if __name__ == "__main__":
    main()
