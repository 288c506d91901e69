"""inference.py run time against a local fake model, and replay timing accuracy against a fake
streaming server with known delays (both on 127.0.0.1; the fake is tests/fakes/openai_server.py).

    python benchmarks/openenv_agent_replay.py [--requests 100] [--rate 10] [--ttft-s 0.1] [--itl-s 0.01]

Prints Markdown for docs/bench/openenv.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes.openai_server import FakeOpenAIServer  # noqa: E402


def run_inference() -> tuple[float, int, str]:
    with FakeOpenAIServer(responder=lambda b, i: json.dumps({"batch_cap": 64 + 32 * (i % 3),
                                                            "kv_budget_fraction": 0.85})) as srv:
        env = dict(os.environ, API_BASE_URL=srv.base_url, MODEL_NAME="fake-model", HF_TOKEN="x",
                   OMP_NUM_THREADS="1")
        env.pop("ENV_URL", None)
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, str(ROOT / "inference.py")], capture_output=True,
                             text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - t0
        calls = len(srv.requests)
    if res.returncode != 0:
        raise SystemExit(res.stderr[-2000:])
    grades = [ln for ln in res.stderr.splitlines() if "grade=" in ln]
    return wall, calls, "; ".join(g.lstrip("# ") for g in grades)


def run_replay(n: int, rate: float, ttft_s: float, itl_s: float) -> dict[str, float]:
    from inferencegym.apps.replay import ReplayConfig, run_replay as replay

    rng = np.random.default_rng(0)
    arrival = np.cumsum(rng.exponential(1.0 / rate, size=n))
    out = rng.integers(8, 33, size=n)
    # the fake in its own process, so its threads do not share the GIL with the client's event loop
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes" / "openai_server.py"),
                             "--ttft-s", str(ttft_s), "--itl-s", str(itl_s)],
                            stdout=subprocess.PIPE, text=True)
    try:
        base_url = proc.stdout.readline().strip()
        res = replay(arrival, np.full(n, 256), out,
                     ReplayConfig(endpoint=base_url, model="m", concurrency=64))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    rec = res.records
    ttft_err = rec["ttft_s"] - ttft_s
    itl_err = res.itl_s - itl_s
    return {"ttft_err_p50_ms": float(np.median(ttft_err) * 1e3),
            "ttft_err_p99_ms": float(np.percentile(ttft_err, 99) * 1e3),
            "itl_err_p50_ms": float(np.median(itl_err) * 1e3),
            "itl_err_p99_ms": float(np.percentile(itl_err, 99) * 1e3),
            "client_wait_p99_ms": float(np.percentile(rec["client_wait_s"], 99) * 1e3),
            "failed": int(rec["rejected"].sum()), "wall_s": res.wall_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--ttft-s", type=float, default=0.1)
    ap.add_argument("--itl-s", type=float, default=0.01)
    args = ap.parse_args()
    wall, calls, grades = run_inference()
    print(f"inference.py, 3 tasks x 200 windows, fake model: {wall:.1f} s wall, {calls} LLM calls "
          f"({grades})\n")
    r = run_replay(args.requests, args.rate, args.ttft_s, args.itl_s)
    print(f"replay of {args.requests} requests at {args.rate} req/s (Poisson), fake TTFT "
          f"{args.ttft_s * 1e3:.0f} ms, ITL {args.itl_s * 1e3:.0f} ms, {r['failed']} failed, "
          f"{r['wall_s']:.1f} s wall\n")
    print("| measured - true | p50 (ms) | p99 (ms) |\n|---|---:|---:|")
    print(f"| TTFT | {r['ttft_err_p50_ms']:.1f} | {r['ttft_err_p99_ms']:.1f} |")
    print(f"| inter-token gap | {r['itl_err_p50_ms']:.2f} | {r['itl_err_p99_ms']:.2f} |")
    print(f"| client wait for a slot | - | {r['client_wait_p99_ms']:.1f} |")


if __name__ == "__main__":
    main()
