"""Markdown/HTML training reports with PNG plots (matplotlib).

A report covers one or more *run records* (JSON written by ``benchmarks/train_ppo.py`` and
``inferencegym demo``)::

    {"task": "cluster_routing", "name": "ppo_cluster_routing", "config": "rllib_configs/...yaml",
     "progress_csv": ".../progress.csv",           # the trial's Tune results (result.json is read)
     "train": {"wall_s": ..., "env_steps": ..., "env_steps_per_s": ..., "checkpoint": ...},
     "rows": [{"policy": ..., "score_mean": ..., "score_ci95": ..., "ttft_p99_s": ...}, ...]}

For each run: a learning curve (episode return and grade against env steps) and the
policy-versus-baselines chart (grade with 95 % CI, p99 TTFT); plus one table per task.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

RETURN_COL = "env_runners/episode_return_mean"
GRADE_COL = "env_runners/grade/score"
STEPS_COL = "num_env_steps_sampled_lifetime"
LOAD_COL = "curriculum/load_scale"


def read_progress(path: str | Path) -> dict[str, list[float]]:
    """Per-iteration series from a Tune trial's ``result.json`` (JSON lines; given the trial dir,
    its ``result.json`` or its ``progress.csv``, whose header only has the first iteration's keys).
    Keys are flattened with ``/``; iterations without a value get NaN."""
    p = Path(path)
    if p.is_dir():
        p = p / "result.json"
    elif p.name == "progress.csv":
        p = p.with_name("result.json")
    if not p.is_file():
        raise FileNotFoundError(f"no Tune result.json at {p}")
    want = (STEPS_COL, RETURN_COL, GRADE_COL, "training_iteration", "time_total_s", LOAD_COL)
    cols: dict[str, list[float]] = {c: [] for c in want}
    for line in p.read_text().splitlines():
        if not line.strip():
            continue
        res = json.loads(line)
        for c in want:
            node: Any = res
            for part in (c.split("/", 1) if c.startswith("env_runners/") else [c]):
                node = node.get(part) if isinstance(node, dict) else None
            try:
                cols[c].append(float(node) if node is not None else math.nan)
            except (TypeError, ValueError):
                cols[c].append(math.nan)
    return {c: v for c, v in cols.items() if v and not all(math.isnan(x) for x in v)}


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _ci(r: dict[str, Any], key: str, ci_key: str) -> str:
    v = _fmt(r.get(key))
    return f"{v} ± {_fmt(r.get(ci_key))}" if r.get(ci_key) is not None else v


def table_markdown(rows: list[dict[str, Any]]) -> str:
    head = "| policy | grade (mean ± 95% CI) | p99 TTFT s | p99 TBT s | p99 E2E s | throughput tok/s |\n"
    head += "|---|---|---|---|---|---|\n"
    body = "".join(
        f"| {r['policy']} | {_fmt(r.get('score_mean'))} ± {_fmt(r.get('score_ci95'))} | "
        f"{_ci(r, 'ttft_p99_s', 'ttft_p99_ci95')} | {_fmt(r.get('tbt_p99_s'))} | "
        f"{_ci(r, 'e2e_p99_s', 'e2e_p99_ci95')} | {_fmt(r.get('throughput_tok_s'), 1)} |\n" for r in rows)
    return head + body


def plot_learning_curve(progress: dict[str, list[float]], title: str, out: Path,
                        references: dict[str, float] | None = None) -> Path:
    """Training return and grade against env steps. The grade axis is the grade's whole range
    [0, 1] and the return axis starts at 0, so a move of 0.01 looks like one (an autoscaled axis
    turns noise into a climb); ``references`` (name -> held-out grade: the rule, the warm start)
    are drawn as dashed lines on the grade axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = progress.get(STEPS_COL) or progress.get("training_iteration") or []
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, col, label in ((axes[0], RETURN_COL, "episode return (mean)"), (axes[1], GRADE_COL, "grade (mean)")):
        y = progress.get(col)
        if y:
            xs = [a for a, b in zip(x, y) if math.isfinite(b)]
            ax.plot(xs, [b for b in y if math.isfinite(b)], marker="o", ms=3)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("env steps sampled")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[1].set_ylim(0.0, 1.0)
    lo, hi = axes[0].get_ylim()
    axes[0].set_ylim(min(0.0, lo), max(hi, 0.0))
    for i, (name, v) in enumerate((references or {}).items()):
        if v is not None and math.isfinite(v):
            axes[1].axhline(v, ls="--", lw=1, color=f"C{i + 1}", label=f"{name} (held-out) {v:.3f}")
    if references:
        axes[1].legend(fontsize=7, loc="lower right")
    load = progress.get(LOAD_COL)
    if load and any(v != 1.0 for v in load if math.isfinite(v)):
        tw = axes[1].twinx()  # the training grade is measured under the curriculum's load
        tw.step(x[:len(load)], load, where="post", color="tab:gray", alpha=0.6, label="curriculum load scale")
        tw.set_ylabel("curriculum load scale", color="tab:gray")
        tw.set_ylim(0, 1.1)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_comparison(rows: list[dict[str, Any]], title: str, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["policy"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    score = [r.get("score_mean") or 0.0 for r in rows]
    ci = [r.get("score_ci95") or 0.0 for r in rows]
    colors = ["tab:orange" if i == 0 else "tab:blue" for i in range(len(rows))]
    axes[0].bar(names, score, yerr=ci, capsize=4, color=colors)
    axes[0].set_ylabel("grade (mean, 95% CI)")
    ttft = [r.get("ttft_p99_s") if r.get("ttft_p99_s") is not None else math.nan for r in rows]
    tci = [r.get("ttft_p99_ci95") or 0.0 for r in rows]
    axes[1].bar(names, ttft, yerr=tci, capsize=4, color=colors)
    axes[1].set_ylabel("p99 TTFT (s)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=25)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_report(records: list[dict[str, Any]], out_dir: str | Path, *, title: str = "InferenceGym training report") -> dict[str, Path]:
    """Write ``report.md``, ``report.html`` and the PNGs into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = [f"# {title}\n"]
    html_parts = [f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                  "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
                  "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}</style>"
                  f"</head><body><h1>{html.escape(title)}</h1>"]
    files: dict[str, Path] = {}
    for rec in records:
        task, name = rec["task"], rec.get("name", rec["task"])
        stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in name).strip("_")
        md.append(f"\n## {task} ({name})\n")
        html_parts.append(f"<h2>{html.escape(task)} ({html.escape(name)})</h2>")
        train = rec.get("train") or {}
        if train:
            line = ", ".join(f"{k}: {_fmt(v, 2) if isinstance(v, float) else v}" for k, v in train.items())
            md.append(f"Training: {line}\n")
            html_parts.append(f"<p>Training: {html.escape(line)}</p>")
        if rec.get("command"):
            md.append(f"\nCommand: `{rec['command']}`\n")
            html_parts.append(f"<p>Command: <code>{html.escape(rec['command'])}</code></p>")
        if rec.get("progress_csv") and _has_results(rec["progress_csv"]):
            refs = {str(r["policy"]): r.get("score_mean") for r in (rec.get("rows") or [])
                    if str(r["policy"]).startswith(("warm start", "phase_rule", "best_static", "estimated_ttft"))}
            png = plot_learning_curve(read_progress(rec["progress_csv"]), f"{name}: learning curve",
                                      out / f"{stem}_learning_curve.png", references=refs)
            files[png.name] = png
            md.append(f"\n![learning curve]({png.name})\n")
            html_parts.append(f"<img src='{png.name}' width='900'>")
        rows = rec.get("rows") or []
        if rows:
            seeds = rows[0].get("seeds") or []
            seed_s = f"seeds {seeds[0]}..{seeds[-1]}" if seeds else ""
            md.append(f"\nPolicy vs baselines ({rows[0].get('episodes')} episodes, {seed_s}):\n\n")
            md.append(table_markdown(rows))
            png = plot_comparison(rows, f"{task}: policy vs baselines", out / f"{stem}_comparison.png")
            files[png.name] = png
            md.append(f"\n![comparison]({png.name})\n")
            html_parts.append(f"<p>Policy vs baselines ({rows[0].get('episodes')} episodes, {html.escape(seed_s)})</p>")
            html_parts.append(_table_html(rows))
            html_parts.append(f"<img src='{png.name}' width='900'>")
    html_parts.append("</body></html>")
    (out / "report.md").write_text("".join(md))
    (out / "report.html").write_text("".join(html_parts))
    (out / "records.json").write_text(json.dumps(records, indent=2, default=str))
    files["report.md"] = out / "report.md"
    files["report.html"] = out / "report.html"
    return files


def _has_results(path: str | Path) -> bool:
    p = Path(path)
    return (p / "result.json").is_file() if p.is_dir() else p.with_name("result.json").is_file()


def _table_html(rows: list[dict[str, Any]]) -> str:
    head = ("<table><tr><th>policy</th><th>grade (mean ± 95% CI)</th><th>p99 TTFT s</th>"
            "<th>p99 TBT s</th><th>p99 E2E s</th><th>throughput tok/s</th></tr>")
    body = "".join(
        f"<tr><td>{html.escape(str(r['policy']))}</td><td>{_fmt(r.get('score_mean'))} ± {_fmt(r.get('score_ci95'))}</td>"
        f"<td>{_fmt(r.get('ttft_p99_s'))}</td><td>{_fmt(r.get('tbt_p99_s'))}</td><td>{_fmt(r.get('e2e_p99_s'))}</td>"
        f"<td>{_fmt(r.get('throughput_tok_s'), 1)}</td></tr>" for r in rows)
    return head + body + "</table>"


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Run records from a JSON file or every ``*.json`` of a directory."""
    p = Path(path)
    files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no run records (*.json) at {p}")
    recs = []
    for f in files:
        data = json.loads(f.read_text())
        recs.extend(data if isinstance(data, list) else [data])
    bad = [r for r in recs if not isinstance(r, dict) or "task" not in r]
    if bad:
        raise ValueError(f"{p}: run records need a 'task' key; got {bad[:1]}")
    return recs
