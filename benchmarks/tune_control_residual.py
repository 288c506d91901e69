"""Choose the residual autoscaler's cost knobs on the validation days: an up-head quantile (caps the
replicas the correction adds) and ``max_up``, on top of a trained residual module.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD nice -n 5 .venv/bin/python benchmarks/tune_control_residual.py \\
        --base inferencegym/data/pretrained/cluster_autoscaling \\
        --load-windows $SV/language__m-large__windows.parquet,$SV/language__m-small__windows.parquet \\
        --up-quantiles 0.3,0.45 --max-ups 2,1 --groups "m-small val" --cache /tmp/tune_cache.json

1. The base module's main net, gate and normalisation are kept as they are (its downward cuts do
   not move); for each ``--up-quantiles`` value a second net (``up_head``) is fitted on the same
   training data as ``train_control_residual.py`` builds (same ``--seeds`` / ``--seed``: the base's
   own data), to that quantile of teacher minus rule; upward corrections are capped by it.
2. Candidates = {base} + up-quantiles x max-ups (+ base with each max-up), each evaluated on the
   validation days only (groups as in ``train_control_residual.py``: each file's validation days
   with its profile, its first validation day as a one-day file; ``--val-seeds`` seeds from 5000),
   paired with ``scheduled`` on the same episodes. Every episode result is cached in ``--cache``
   (keyed by candidate, group, day, seed), so a second call with more groups re-runs nothing.
3. Per candidate and group: score, GPU-hours % and SLO points against ``scheduled``; whether the
   group meets a form of issue 22's goal (GPU-hours <= -10 % at SLO >= -0.5 points, or SLO >=
   +10 points at GPU-hours <= 0 %). With ``--export-dir`` the candidate named by ``--export`` is
   written as a pretrained-format module.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

import inferencegym.rl  # noqa: F401  (registers the control handlers)
from inferencegym.evaluation.control import run_episode
from inferencegym.rl.control import LearnedAutoscaler
from inferencegym.tasks.control import day_split, get_control_task, load_windows
from train_control_residual import _Greedy, build, one_day_file, training_sources  # benchmarks/ (script dir)

TASK = "cluster_autoscaling"


def goal_form(gpu_pct: float, slo_pts: float) -> str:
    """Which form of issue 22's goal a (GPU-hours %, SLO points) difference against the best rule meets."""
    if gpu_pct <= -10.0 and slo_pts >= -0.5:
        return "cost"
    if slo_pts >= 10.0 and gpu_pct <= 0.0:
        return "slo"
    return "-"


def base_module(path: str):
    from inferencegym.rl.policy_loader import load_exported

    return load_exported(path, TASK).modules["default_policy"]


def with_up_head(base, x: np.ndarray, y: np.ndarray, quantile: float, epochs: int, seed: int):
    """A copy of ``base`` with an up-head fitted to ``quantile`` (main net, gate, normalisation unchanged)."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    import torch

    from inferencegym.rl.control_residual import ResidualAutoscalerModule, fit_residual

    torch.manual_seed(seed)  # the same head for the same quantile, whichever others a call fits
    m = RLModuleSpec(module_class=ResidualAutoscalerModule, observation_space=base.observation_space,
                     action_space=base.action_space, model_config={**base.model_config, "up_head": True}).build()
    m.load_state_dict(base.state_dict(), strict=False)
    fit_residual(m, x, y, quantile=quantile, epochs=epochs, seed=seed, head="up")
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="exported residual module (pretrained format)")
    ap.add_argument("--load-windows", required=True, help="comma-separated windows files (training and validation)")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--scale-range", default="0.6,1.3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--up-quantiles", default="0.3,0.45")
    ap.add_argument("--max-ups", default="2", help="comma-separated max_up values (inference-time bound)")
    ap.add_argument("--groups", default=None, help="comma-separated group names to evaluate (default: all)")
    ap.add_argument("--only", default=None, help="comma-separated candidate names to evaluate")
    ap.add_argument("--val-seeds", type=int, default=1)
    ap.add_argument("--cache", required=True, help="JSON cache of episode results (read and extended)")
    ap.add_argument("--export", default=None, help="candidate name to export (e.g. up0.25_max2), or 'all' "
                    "(each to EXPORT_DIR/NAME)")
    ap.add_argument("--export-dir", default=None)
    ap.add_argument("--out", default=None, help="JSON summary")
    a = ap.parse_args()
    import torch

    torch.manual_seed(a.seed)
    files = a.load_windows.split(",")
    c0 = time.process_time()
    base = base_module(a.base)
    cands = {f"base_max{mu}": (None, int(mu)) for mu in a.max_ups.split(",")}
    cands.update({f"up{q}_max{mu}": (float(q), int(mu)) for q in a.up_quantiles.split(",")
                  for mu in a.max_ups.split(",")})
    if a.only:
        cands = {k: v for k, v in cands.items() if k in a.only.split(",") or k == a.export}
    modules: dict[float | None, object] = {None: base}
    ups = sorted({q for q, _ in cands.values() if q is not None})
    if ups:
        x, y = build(training_sources(files, a.seeds, tuple(float(v) for v in a.scale_range.split(",")), a.seed))
        print(f"training samples {len(x)}, {time.process_time() - c0:.0f} s CPU", flush=True)
        for q in ups:
            modules[q] = with_up_head(base, x, y, q, a.epochs, a.seed)
    task = get_control_task(TASK)
    tmp = Path(tempfile.mkdtemp(prefix="residual_tune_"))
    groups = []
    for f in files:
        val = day_split(len(load_windows(f)))["validation"]
        groups.append((Path(f).stem.split("__")[1] + " val", f, val))
        groups.append((Path(f).stem.split("__")[1] + " one-day", one_day_file(f, val[0], tmp), [0]))
    if a.groups:
        keep = a.groups.split(",")
        groups = [g for g in groups if g[0] in keep]
    plan = [(g, f, d, 5000 + i) for g, f, days in groups for i in range(a.val_seeds) for d in days]
    cache_path = Path(a.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}

    def episode(name: str, g: str, f: str, d: int, s: int, pol) -> dict:
        key = f"{name}|{g}|{d}|{s}"
        if key not in cache:
            r = run_episode(task, "scheduled", day=d, seed=s, load_windows_path=f, autoscaler=pol)
            cache[key] = {k: r[k] for k in ("score", "gpu_hours", "slo_attainment")}
            tmpf = cache_path.with_suffix(".tmp")
            tmpf.write_text(json.dumps(cache, indent=0))
            tmpf.replace(cache_path)
        return cache[key]

    summary: dict = {"args": vars(a), "candidates": {}}
    for name, (q, mu) in cands.items():
        m = modules[q]
        m.max_up = mu
        pol = LearnedAutoscaler(_Greedy(m), features="residual", name=name)
        per: dict[str, dict] = {}
        for g, f, d, s in plan:
            b = episode("scheduled", g, f, d, s, None)
            r = episode(name, g, f, d, s, pol)
            p = per.setdefault(g, {"score": [], "gpu_pct": [], "slo_pts": []})
            p["score"].append(r["score"] - b["score"])
            p["gpu_pct"].append((r["gpu_hours"] / b["gpu_hours"] - 1) * 100)
            p["slo_pts"].append((r["slo_attainment"] - b["slo_attainment"]) * 100)
        row = {g: {k: float(np.mean(v)) for k, v in p.items()} | {"episodes": len(p["score"])} for g, p in per.items()}
        for g, v in row.items():
            v["form"] = goal_form(v["gpu_pct"], v["slo_pts"])
        summary["candidates"][name] = {"up_quantile": q, "max_up": mu, "groups": row}
        print(f"{name}: " + "; ".join(f"{g} score {v['score']:+.4f} GPU-h {v['gpu_pct']:+.1f} % SLO "
                                      f"{v['slo_pts']:+.1f} pts [{v['form']}]" for g, v in row.items()), flush=True)
    summary["cpu_s"] = time.process_time() - c0
    for name in (list(cands) if a.export == "all" else [a.export] if a.export else []):
        from inferencegym.rl.policy_loader import export_module

        q, mu = cands[name]
        m = modules[q]
        m.max_up = mu
        meta = json.loads((Path(a.base) / "module.json").read_text())
        train = {**meta.get("train", {}), "up_quantile": q, "max_up": mu,
                 "selected_by": f"validation days only (benchmarks/tune_control_residual.py, candidate {name})"}
        cmd = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v is not None
                       and k not in ("out", "cache", "export", "export_dir", "only"))
        out = Path(a.export_dir) / name if a.export == "all" else Path(a.export_dir)
        export_module(m, out, module_type="residual_autoscaler", model_config={**m.model_config, "max_up": mu},
                      module_id="default_policy", task_id=TASK, kind="control",
                      extra={"control": meta["control"], "train": train,
                             "command": f"benchmarks/tune_control_residual.py {cmd} --only {name} --export {name} "
                                        f"--export-dir {out}"})
        print(f"exported {name} to {out}")
    if a.out:
        Path(a.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
