"""Workload speed: `data prepare` rows/s and peak memory on a synthetic BurstGPT-format file, and
`generate` requests/s.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/workload_speed.py [--rows 10000000] [--repeats 3]

The synthetic file (BurstGPT v1 columns, non-decreasing integer timestamps, ~5 % failed rows,
~40 bytes/row) is written under a temporary folder in /tmp and deleted at the end. `data prepare`
runs in a child process (the real CLI, interpreter start included); its peak memory is the
child's max RSS from ``os.wait4``. Prints Markdown (for docs/bench/workload.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_burstgpt(path: Path, rows: int, seed: int = 0, chunk: int = 1_000_000) -> None:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    rng = np.random.default_rng(seed)
    t0 = 0
    opts = pcsv.WriteOptions(include_header=True, quoting_style="none")
    with pcsv.CSVWriter(str(path), pa.schema([("Timestamp", pa.int64()), ("Model", pa.string()),
                                              ("Request tokens", pa.int64()), ("Response tokens", pa.int64()),
                                              ("Total tokens", pa.int64()), ("Log Type", pa.string())]),
                        write_options=opts) as w:
        done = 0
        while done < rows:
            n = min(chunk, rows - done)
            ts = t0 + np.cumsum(rng.integers(0, 3, n))
            t0 = int(ts[-1])
            req = np.rint(np.exp(rng.normal(6, 1, n))).astype(np.int64)
            resp = np.where(rng.random(n) < 0.05, 0, np.rint(np.exp(rng.normal(5, 1, n))).astype(np.int64))
            model = np.where(rng.random(n) < 0.8, "ChatGPT", "GPT-4")
            log = np.where(rng.random(n) < 0.9, "Conversation log", "API log")
            w.write_table(pa.table({"Timestamp": ts, "Model": model, "Request tokens": req,
                                    "Response tokens": resp, "Total tokens": req + resp, "Log Type": log}))
            done += n


def run_prepare(src: Path, out: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of `inferencegym data prepare` in a child process."""
    cmd = [sys.executable, "-m", "inferencegym.cli", "data", "prepare", "--input", str(src), "--output", str(out),
           "--format", "burstgpt"]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    out_s, err_s = p.stdout.read().decode(), p.stderr.read().decode()
    if p.returncode != 0:
        raise RuntimeError(f"prepare failed ({p.returncode}): {err_s}")
    print(f"<!-- {out_s.strip()} -->")
    return wall, usage.ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from inferencegym.workload.fit import default_fit, generate

    with tempfile.TemporaryDirectory(prefix="ig_workload_bench_", dir="/tmp") as d:
        src, out = Path(d) / "burstgpt_synth.csv", Path(d) / "pool.parquet"
        t = time.perf_counter()
        write_burstgpt(src, args.rows)
        print(f"synthetic file: {args.rows:,} rows, {src.stat().st_size / 2**20:.0f} MiB "
              f"(written in {time.perf_counter() - t:.1f} s)\n")
        runs = [run_prepare(src, out) for _ in range(args.repeats)]
        wall = float(np.median([r[0] for r in runs]))
        rss = float(max(r[1] for r in runs))
        print("| measure | value |\n|---|---|")
        print(f"| `data prepare` wall time (median of {args.repeats}) | {wall:.1f} s |")
        print(f"| `data prepare` rows/s | {args.rows / wall:,.0f} |")
        print(f"| `data prepare` peak RSS (max of runs) | {rss:,.0f} MiB |")
        print(f"| pool size | {out.stat().st_size / 2**20:.0f} MiB |")
    for name, dur in (("azure_conv", 86400.0), ("azure_code", 86400.0)):
        fit = default_fit(name)
        times, n = [], 0
        for s in range(args.repeats):
            t = time.perf_counter()
            w = generate(fit, dur, np.random.default_rng(s))
            times.append(time.perf_counter() - t)
            n = len(w)
        med = float(np.median(times))
        print(f"| `generate` {name}, {dur / 3600:.0f} h ({n:,} requests), median of {args.repeats} | "
              f"{med:.2f} s = {n / med:,.0f} requests/s |")
    fit = default_fit("azure_conv").with_rate(200.0)
    times = []
    for s in range(args.repeats):
        t = time.perf_counter()
        w = generate(fit, 3600.0, np.random.default_rng(s))
        times.append(time.perf_counter() - t)
    med = float(np.median(times))
    print(f"| `generate` azure_conv at 200 req/s, 1 h ({len(w):,} requests), median of {args.repeats} | "
          f"{med:.2f} s = {len(w) / med:,.0f} requests/s |")


if __name__ == "__main__":
    main()
