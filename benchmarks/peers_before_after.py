"""InferenceGym before / after a change, side by side with BLIS, interleaved (issue 24 speed targets).

Drives the shared peer tool (``../shared/tools/peers/speed_side_by_side.py``: its trace preparation
and its ``run_ig`` / ``run_blis``, which time the simulator's own loop, the whole process and the
child's CPU seconds). Each round runs, per scenario, InferenceGym from every ``--tree`` (a source
tree put first on ``PYTHONPATH``; e.g. ``git archive`` of the base commit into /tmp) and then BLIS
with ``--cache-signal-delay 0``: A B C A B C ... Writes ``runs.jsonl`` and ``summary.md`` (medians,
ratios BLIS / InferenceGym of loop, process and CPU seconds) to ``--out``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/peers_before_after.py --tree before=/tmp/ig_base \\
        --tree after=$PWD --blis-bin $BLIS_OUT/blis --blis-src $BLIS_SRC --rounds 3 --out /tmp/peers_ba

``--pure NAME`` runs that tree with ``INFERENCEGYM_PURE_PYTHON=1`` (the compiled core of
``inferencegym.accel`` off): ``--tree pure=$PWD --tree compiled=$PWD --pure pure``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def _peer_tool(path: Path):
    if not path.is_file():
        raise SystemExit(f"peer tool not found: {path} (expected the shared tools/peers folder; give --tool)")
    spec = importlib.util.spec_from_file_location("speed_side_by_side", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=PATH",
                    help="an InferenceGym source tree to time (repeat: before=..., after=...)")
    ap.add_argument("--ig-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--blis-bin", required=True)
    ap.add_argument("--blis-src", required=True)
    ap.add_argument("--tool", type=Path, default=SHARED / "tools" / "peers" / "speed_side_by_side.py")
    ap.add_argument("--azure-conv", type=Path,
                    default=SHARED / "reference" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    ap.add_argument("--mooncake", type=Path,
                    default=SHARED / "reference" / "traces" / "mooncake" / "synthetic_trace.jsonl")
    ap.add_argument("--scenarios", default="azure,mooncake")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pure", action="append", default=[], metavar="NAME",
                    help="run the tree named NAME with INFERENCEGYM_PURE_PYTHON=1 (repeat; e.g. the same "
                         "tree twice, as pure=$PWD and compiled=$PWD, to time the compiled core)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bytecode", action="store_true",
                    help="byte-compile each tree's package once before timing (python -m compileall, as "
                         "a wheel install leaves it); without it, under PYTHONDONTWRITEBYTECODE=1 every "
                         "process compiles the package's modules from source")
    a = ap.parse_args(argv)
    tool = _peer_tool(a.tool)
    trees = []
    for t in a.tree:
        name, sep, path = t.partition("=")
        if not sep or not Path(path).is_dir():
            raise SystemExit(f"--tree expects NAME=PATH with an existing folder, got {t!r}")
        trees.append((name, str(Path(path).resolve())))
    a.out.mkdir(parents=True, exist_ok=True)
    if a.bytecode:
        import subprocess

        for _name, path in trees:
            subprocess.run([a.ig_python, "-m", "compileall", "-q", str(Path(path) / "inferencegym")],
                           check=True, capture_output=True)
    scen: dict = {}
    if "azure" in a.scenarios:
        tool.prep_conv(a.azure_conv, a.out)
        scen["azure"] = (
            ["--trace", str(a.out / "conv_clipped_replay.csv"), "--trace-format", "replay", "--model", "llama-2-7b",
             "--gpu", "a100-80gb", "--tensor-parallel", "1", "--replicas", "4", "--router", "round_robin",
             "--scheduler", "vllm", "--batch-cap", "128"],
            (a.out / "conv_clipped_blis.yaml", a.out / "conv_clipped_blis.csv",
             ["--model", "meta-llama/llama-2-7b-hf", "--hardware", "A100-80", "--tp", "1", "--num-instances", "4",
              "--routing-policy", "round-robin", "--max-num-seqs", "128", "--max-num-batched-tokens", "4096",
              "--max-model-len", "4096", "--cache-signal-delay", "0"]))
    if "mooncake" in a.scenarios:
        tool.prep_mooncake(a.mooncake, a.out)
        scen["mooncake"] = (
            ["--trace", str(a.mooncake), "--trace-format", "mooncake", "--model", "llama-3-8b", "--gpu", "h100-80gb",
             "--tensor-parallel", "1", "--replicas", "8", "--scheduler", "vllm", "--prefix-caching",
             "--router", "round_robin"],
            (a.out / "mooncake_blis.yaml", a.out / "mooncake_blis.csv",
             ["--model", "meta-llama/llama-3.1-8b-instruct", "--hardware", "H100", "--tp", "1", "--num-instances", "8",
              "--routing-policy", "round-robin", "--cache-signal-delay", "0"]))
    ig_bin = [a.ig_python, "-P", "-m", "inferencegym.cli"]  # -P: the tree on PYTHONPATH, not the cwd, wins
    log = open(a.out / "runs.jsonl", "a")
    res: dict = {}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    for rnd in range(a.rounds):
        for sname, (ig_opts, (hdr, data, bl_opts)) in scen.items():
            for name, path in trees:
                os.environ["PYTHONPATH"] = path
                os.environ["INFERENCEGYM_PURE_PYTHON"] = "1" if name in a.pure else "0"
                out = _run_ig(tool, ig_bin, ig_opts)
                out.update(variant=name, scenario=sname, round=rnd, load1=os.getloadavg()[0])
                res.setdefault((sname, name), []).append(out)
                log.write(json.dumps(out) + "\n")
                log.flush()
                print(json.dumps(out), flush=True)
            out = tool.run_blis(a.blis_bin, a.blis_src, hdr, data, bl_opts, a.out)
            out.update(variant="BLIS csd0", scenario=sname, round=rnd, load1=os.getloadavg()[0])
            res.setdefault((sname, "BLIS csd0"), []).append(out)
            log.write(json.dumps(out) + "\n")
            log.flush()
            print(json.dumps(out), flush=True)
    md = [f"Started {started}, finished {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
          f"{a.rounds} interleaved rounds; load average at the end {os.getloadavg()[0]:.1f}"
          f"{'; trees byte-compiled first' if a.bytecode else ''}.", ""]
    med = lambda xs: statistics.median(xs)  # noqa: E731
    for sname in scen:
        blis = res[(sname, "BLIS csd0")]
        bl = {k: med([r[k] for r in blis]) for k in ("loop_s", "process_s", "cpu_s")}
        md += [f"## {sname}", "",
               "| variant | loop s (median) | process s | CPU s | loop ratio BLIS/IG | process ratio | CPU ratio |",
               "|---|---|---|---|---|---|---|"]
        for name, _ in trees + [("BLIS csd0", None)]:
            rs = res[(sname, name)]
            m = {k: med([r[k] for r in rs]) for k in ("loop_s", "process_s", "cpu_s")}
            md.append(f"| {name} | {m['loop_s']:.3f} | {m['process_s']:.2f} | {m['cpu_s']:.2f} | "
                      f"{bl['loop_s'] / m['loop_s']:.2f} | {bl['process_s'] / m['process_s']:.2f} | "
                      f"{bl['cpu_s'] / m['cpu_s']:.2f} |")
        md.append("")
    (a.out / "summary.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


def _run_ig(tool, cmd: list[str], opts: list[str]) -> dict:
    """The peer tool's ``run_ig`` with ``python -m inferencegym.cli`` instead of a console script
    (so that ``PYTHONPATH`` picks the tree)."""
    p, wall, cpu = tool._run([*cmd, "simulate", "--json", *opts])
    s = json.loads(p.stdout[p.stdout.index("{"):])
    return {"loop_s": s["wall_s"], "process_s": wall, "cpu_s": cpu, "requests": s["requests_total"],
            "completed": s["requests_completed"], "prefix_hit_rate": s.get("prefix_hit_rate"),
            "ttft_p99_s": (s.get("ttft_s") or {}).get("p99")}


if __name__ == "__main__":
    raise SystemExit(main())
