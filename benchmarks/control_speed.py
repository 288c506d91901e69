"""Speed of one simulated day of ``cluster_autoscaling`` (CPU seconds), and how it scales with the
fleet size (the load scales with ``max_replicas``: the peak is 80 % of the full fleet's capacity).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/control_speed.py

Prints one line per configuration: max replicas, time compression, requests, CPU s, wall s,
requests per CPU second.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from inferencegym.evaluation.control import run_episode
from inferencegym.tasks.control import get_control_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="wva")
    ap.add_argument("--day", type=int, default=12)
    ap.add_argument("--replicas", default="6,12,24")
    ap.add_argument("--window-s", default="150,600", help="seconds per 10-min window (600 = uncompressed)")
    a = ap.parse_args()
    base = get_control_task("cluster_autoscaling")
    print("| max replicas | window s (compression) | requests | CPU s | wall s | requests / CPU s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for ws in (float(x) for x in a.window_s.split(",")):
        for n in (int(x) for x in a.replicas.split(",")):
            if ws != 150.0 and n != 12:
                continue  # uncompressed: the default fleet only
            task = dataclasses.replace(base, max_replicas=n, initial_replicas=max(1, n // 3), window_s=ws)
            c0, w0 = time.process_time(), time.perf_counter()
            out = run_episode(task, a.policy, day=a.day, seed=1)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            print(f"| {n} | {ws:.0f} ({600 / ws:.0f}x) | {out['arrivals']:,} | {cpu:.1f} | {wall:.1f} | "
                  f"{out['arrivals'] / cpu:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
