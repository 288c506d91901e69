"""Fit the host link figures of the CPU KV tier on a ``gpu_host_link.cu`` measurement.

    python benchmarks/host_link_fit.py                                   # the committed H100 run
    python benchmarks/host_link_fit.py benchmarks/results/gpu_h100_2026-11-26/host_link.json --json

Two figures per direction, each from the rows that isolate it:

* ``link_gb_s``: one ``cudaMemcpyAsync`` of 16 MiB or more from / to pinned memory (the median of
  those sizes), where a copy's fixed cost is below 0.2 % of its time;
* ``copy_s``: the fixed GPU time of one copy among N scattered block copies issued back to back (vLLM's
  ``swap_blocks``), least squares on the relative error of ``N x (copy_s + bytes / link)`` over every
  block size (4 KiB - 2 MiB), with ``link`` fixed above.

The simulator's constants (``presets.H100_HOST_LINK_GB_S``, ``cpu_kv.OFFLOAD_COPY_S``) are the
host-to-GPU figures (the direction of a reload), rounded; ``tests/benchmarks/test_host_link_fit.py``
holds them to this fit of the committed file. Also printed: the mapped-memory kernel path (LMCache's
style: one kernel through zero-copy pinned memory) and both directions at once.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results" / "gpu_h100_2026-11-26" / "host_link.json"
BIG_BYTES = 16 * 2**20


def fit(data: dict) -> dict:
    """``{direction: {link_gb_s, copy_s, max_rel_err, mapped_gb_s}}`` plus ``both_gb_s`` (sum of directions)."""
    rows = data["rows"]
    out: dict = {}
    for d in ("h2d", "d2h"):
        big = [r["bytes_each"] / r["gpu_s"] for r in rows
               if r["kind"] == "contiguous" and r["dir"] == d and r["bytes_each"] >= BIG_BYTES]
        if not big:
            raise ValueError(f"no contiguous {d} row of >= 16 MiB in the measurement; rerun gpu_host_link.cu")
        bw = statistics.median(big)
        blocks = [(r["bytes_each"], r["gpu_s"] / r["count"]) for r in rows if r["kind"] == "blocks" and r["dir"] == d]
        if not blocks:
            raise ValueError(f"no block-copy {d} rows in the measurement; rerun gpu_host_link.cu")
        # minimise sum(((c + b / bw) / t - 1)^2) over c: c = sum((1 - b / (bw t)) / t) / sum(1 / t^2)
        c = sum((1 - b / bw / t) / t for b, t in blocks) / sum(1 / t**2 for _, t in blocks)
        err = max(abs((c + b / bw) / t - 1) for b, t in blocks)
        mapped = [r["gb_s"] for r in rows if r["kind"] == "mapped" and r["dir"] == d]
        out[d] = {"link_gb_s": bw / 1e9, "copy_s": c, "max_rel_err": err,
                  "mapped_gb_s": statistics.median(mapped) if mapped else None}
    both = [r["bytes_each"] * r["count"] / r["gpu_s"] / 1e9 for r in rows if r["kind"] == "both"]
    out["both_gb_s"] = both[0] if both else None
    out["device"] = data.get("device")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT, help="gpu_host_link.cu's JSON output")
    ap.add_argument("--json", action="store_true", help="print the fit as JSON")
    a = ap.parse_args(argv)
    res = fit(json.loads(a.path.read_text()))
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"{res['device']}: both directions at once {res['both_gb_s']:.1f} GB/s")
    for d in ("h2d", "d2h"):
        r = res[d]
        print(f"{d}: link {r['link_gb_s']:.2f} GB/s, per copy {r['copy_s'] * 1e6:.2f} us "
              f"(block rows within {r['max_rel_err']:.1%}), mapped kernel {r['mapped_gb_s']:.1f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
