"""Bounded load test of the OpenEnv server: honest sessions with and without one abusive client.

    python benchmarks/server_load.py [--clients 32] [--steps 60] [--abuse-requests 400] [--json]
    python benchmarks/server_load.py --scenario flood [--clients 32] [--steps 60] [--json]

The server runs under uvicorn on 127.0.0.1 in a subprocess (default limits: 64 sessions, half of
them per client, 1 MB bodies). Every client has its own loopback source address (127.0.0.10.. for
the honest ones, 127.0.0.2 for the abuser), so the per-client session cap sees them as different
clients. Phases, each bounded in requests and time:

1. unloaded: the honest clients alone (each: reset, then ``--steps`` steps of ``bursty_workload``);
2. loaded: the same honest clients while the abuser sends, in a loop, at most ``--abuse-requests``
   requests: 4 MB bodies (declared and streamed without Content-Length), malformed JSON, NaN /
   Infinity / 401-digit integers, strings where numbers go, and a flood of ``/reset`` (new sessions).

Reported: honest errors (any non-200), honest step latency p50/p99 per phase, the abuser's status
codes, server RSS (``/proc/<pid>/status`` VmRSS) before, after phase 1 and after phase 2.

``--scenario flood`` (issue 25) runs instead: unloaded, then the honest clients while one client
(127.0.0.2) floods ``/baseline`` (all rows, a new seed each call) from 44 connections and
``/grader`` replays from 4, back to back, then while it floods WebSocket sessions (opens sockets as fast as it is
answered, resets each one it keeps, sends ``[]`` and a 1.2 MB frame on each), then unloaded again.
It reports honest p99 per phase and its ratio to the unloaded median, every response >= 500
(honest and abuser), the abuser's answers, and whether another client (127.0.0.3) can still open a
WebSocket session during the flood.
"""

from __future__ import annotations

import argparse
import collections
import json
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


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def client(url: str, source: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=120, transport=httpx.HTTPTransport(local_address=source))


def honest(url: str, i: int, steps: int, lat: list[float], errors: list[str], barrier: threading.Barrier) -> None:
    with client(url, f"127.0.0.{10 + i}") as c:
        r = c.post("/reset", json={"seed": i, "task_id": TASK})
        if r.status_code != 200:
            errors.append(f"reset {r.status_code}")
            barrier.wait()
            return
        sid = r.json()["session_id"]
        barrier.wait()
        for _ in range(steps):
            t = time.perf_counter()
            r = c.post("/step", json={"session_id": sid, "action": ACTION})
            lat.append(time.perf_counter() - t)
            if r.status_code != 200:
                errors.append(f"step {r.status_code}")
        c.delete(f"/sessions/{sid}")


def abusive(url: str, max_requests: int, stop: threading.Event, codes: collections.Counter) -> None:
    big = b'{"task_id": "' + b"x" * 4_000_000 + b'"}'
    bodies = [
        ("/grader", big, None),
        ("/grader", None, big),  # streamed, no Content-Length
        ("/step", b'{"session_id": "abc", "action": {"batch_cap": NaN}}', None),
        ("/reset", b'{"seed": ' + b"9" * 401 + b"}", None),
        ("/reset", b'{"seed": Infinity}', None),
        ("/step", b'{"session_id": "abc", "action": {"batch_cap": "64"}}', None),
        ("/grader", b'{not json', None),
        ("/reset", b"{}", None),  # session flood (capped per client)
        ("/reset", b"{}", None),
        ("/suggest", b'{"session_id": "abc", "policy": "clairvoyant"}', None),
    ]
    n = 0
    with client(url, "127.0.0.2") as c:
        while n < max_requests and not stop.is_set():
            path, body, stream = bodies[n % len(bodies)]
            content = body if stream is None else iter([stream[i:i + 65536] for i in range(0, len(stream), 65536)])
            try:
                r = c.post(path, content=content, headers={"content-type": "application/json"})
                codes[r.status_code] += 1
            except httpx.HTTPError as exc:  # the server may close a connection after a 413
                codes[type(exc).__name__] += 1
            n += 1


def run_phase(url: str, clients: int, steps: int, abuse: int | None, abuser=None) -> dict:
    lat: list[float] = []
    errors: list[str] = []
    codes: collections.Counter = collections.Counter()
    barrier = threading.Barrier(clients)
    threads = [threading.Thread(target=honest, args=(url, i, steps, lat, errors, barrier)) for i in range(clients)]
    stop = threading.Event()
    abuser = abuser or abusive
    ab = threading.Thread(target=abuser, args=(url, abuse, stop, codes)) if abuse else None
    if ab:
        ab.start()
        ready = getattr(abuser, "ready", None)
        if ready is not None:  # a flood in its own process: start the honest clients once it runs
            ready.wait(180)
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    stop.set()
    if ab:
        ab.join(timeout=120)
    lat.sort()
    return {"honest_steps": len(lat), "honest_errors": len(errors), "errors": errors[:5],
            "p50_ms": 1000 * statistics.median(lat), "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))],
            "wall_s": time.perf_counter() - t0, "abuser_codes": {str(k): v for k, v in codes.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--abuse-requests", type=int, default=400)
    ap.add_argument("--tree", default=None,
                    help="run the server from this source tree (e.g. an older checkout, for a before/after)")
    ap.add_argument("--scenario", choices=["malformed", "flood"], default="malformed",
                    help="malformed: the issue-17 abuser; flood: /baseline and WebSocket floods (issue 25)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not 1 <= args.clients <= 200 or not 1 <= args.steps <= 1000 or not 1 <= args.abuse_requests <= 10_000:
        sys.exit("bounded test: --clients 1..200, --steps 1..1000, --abuse-requests 1..10000")
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cwd = None
    if args.tree:  # `python -m` puts the working directory first on sys.path
        cwd = os.path.abspath(args.tree)
        env["PYTHONPATH"] = cwd
    proc = subprocess.Popen([sys.executable, "-m", "inferencegym.apps.env_server.app", "--host", "127.0.0.1",
                             "--port", str(port), "--max-sessions", "64"], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline or proc.poll() is not None:
                sys.exit("server did not start")
            time.sleep(0.2)
        out = {"rss_mb_start": rss_mb(proc.pid)}
        run_phase(url, 2, 5, None)  # warm-up (imports, first env build)
        if args.scenario == "flood":
            from server_flood import flood_report, run_flood_phases

            out.update(run_flood_phases(url, proc.pid, args.clients, args.steps, 100 * args.abuse_requests,
                                        run_phase, rss_mb))
            out["args"] = vars(args)
            print(json.dumps(out, indent=1) if args.json else flood_report(out))
            return
        out["rss_mb_warm"] = rss_mb(proc.pid)
        out["unloaded"] = run_phase(url, args.clients, args.steps, None)
        out["rss_mb_after_unloaded"] = rss_mb(proc.pid)
        out["loaded"] = run_phase(url, args.clients, args.steps, args.abuse_requests)
        out["rss_mb_after_loaded"] = rss_mb(proc.pid)
        out["server_alive"] = httpx.get(f"{url}/health", timeout=10).status_code == 200
        out["args"] = vars(args)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    u, l_ = out["unloaded"], out["loaded"]
    print(f"| phase | honest steps | honest errors | p50 step ms | p99 step ms | wall s | server RSS after MB |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.clients} honest sessions alone | {u['honest_steps']} | {u['honest_errors']} | "
          f"{u['p50_ms']:.1f} | {u['p99_ms']:.1f} | {u['wall_s']:.1f} | {out['rss_mb_after_unloaded']:.0f} |")
    print(f"| + abusive client | {l_['honest_steps']} | {l_['honest_errors']} | {l_['p50_ms']:.1f} | "
          f"{l_['p99_ms']:.1f} | {l_['wall_s']:.1f} | {out['rss_mb_after_loaded']:.0f} |")
    print(f"\nserver RSS: start {out['rss_mb_start']:.0f} MB, warm {out['rss_mb_warm']:.0f} MB; "
          f"abuser status codes: {l_['abuser_codes']}; server alive after: {out['server_alive']}")


if __name__ == "__main__":
    main()
