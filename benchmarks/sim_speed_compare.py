"""Simulator speed of two commits side by side in one run (interleaved, same machine state).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sim_speed_compare.py --base e9ca877 --rounds 5 \
        [--new-args "--engine-profile vllm-2023"]

Checks ``--base`` out into a temporary worktree (``git worktree add --detach``), then alternates
``benchmarks/sim_speed.py --repeats 1 --json`` of the base and of this checkout ``--rounds`` times,
and prints per replica count the median wall and CPU seconds of each side and their ratio (new /
base). CPU time is the steadier figure on a busy machine; the 1-minute load average of each run is
printed too. Each side imports its own tree (``PYTHONPATH``) with this venv.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(tree: Path, extra: list[str]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "benchmarks/sim_speed.py", "--repeats", "1", "--json", *extra],
                         cwd=tree, env=env, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="commit to compare against")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base-args", default="", help="extra sim_speed.py arguments for the base")
    ap.add_argument("--new-args", default="", help="extra sim_speed.py arguments for this checkout")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sim_speed_base_"))
    base = tmp / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=REPO, check=True,
                   capture_output=True)
    # the benchmark reads ../shared/reference next to the tree
    (tmp / "shared").symlink_to(REPO.parent / "shared")
    rows: dict[tuple[str, int], list[dict]] = defaultdict(list)
    try:
        for _ in range(args.rounds):
            for side, tree, extra in (("base", base, args.base_args), ("new", REPO, args.new_args)):
                for r in run(tree, shlex.split(extra)):
                    rows[(side, r["replicas"])].append(r)
                    print(json.dumps({"side": side, "replicas": r["replicas"], "wall_s": r["wall_s_median"],
                                      "cpu_s": r["cpu_s_median"], "load_1min": r.get("load_average_1min")}),
                          flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO, capture_output=True)
    for n in sorted({k[1] for k in rows}):
        med = {side: {m: statistics.median(r[f"{m}_median"] for r in rows[(side, n)])
                      for m in ("wall_s", "cpu_s")} for side in ("base", "new")}
        print(f"{n} replica(s): wall {med['base']['wall_s']:.3f} -> {med['new']['wall_s']:.3f} s "
              f"(x{med['new']['wall_s'] / med['base']['wall_s']:.3f}), CPU {med['base']['cpu_s']:.3f} -> "
              f"{med['new']['cpu_s']:.3f} s (x{med['new']['cpu_s'] / med['base']['cpu_s']:.3f}), "
              f"{args.rounds} interleaved rounds")


if __name__ == "__main__":
    main()
