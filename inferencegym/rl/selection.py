"""Checkpoint selection on validation seeds: the policy a training run returns is the best one it saw.

PPO's last checkpoint is not always its best (fine-tuning can drift below a behaviour-cloning warm
start while the stochastic training return stays flat). The candidates are the warm start and every
checkpoint Tune kept; each is evaluated greedily on *validation* seeds (500.. by default: disjoint
from the held-out evaluation seeds 1000.. and from the BC seeds 10,000..), and the best mean grade
wins (ties: the later candidate, i.e. the more trained one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferencegym.rl.compare import evaluate_one
from inferencegym.rl.policy_loader import load_checkpoint

VALIDATION_SEED = 500
"""First validation seed (held-out evaluation starts at 1000)."""
WARM_START = "warm start (BC)"
"""Name of the warm-start candidate."""


def trial_checkpoints(last_checkpoint: str | Path) -> list[Path]:
    """``checkpoint_NNNNNN`` directories of the Tune trial of ``last_checkpoint``, oldest first."""
    trial = Path(last_checkpoint).parent
    cks = [p for p in trial.iterdir() if p.is_dir() and re.fullmatch(r"checkpoint_\d+", p.name)]
    return sorted(cks, key=lambda p: int(p.name.split("_")[1]))


@dataclass
class Selection:
    """The outcome of a selection: the chosen candidate and the validation table."""

    selected: str
    policy: Any
    table: list[dict[str, Any]] = field(default_factory=list)
    val_episodes: int = 0
    val_seed: int = VALIDATION_SEED

    @property
    def is_warm_start(self) -> bool:
        return self.selected == WARM_START

    def row(self, name: str) -> dict[str, Any] | None:
        """The validation row of candidate ``name`` (None if it was not a candidate)."""
        return next((r for r in self.table if r["candidate"] == name), None)

    @property
    def selected_path(self) -> str:
        """Directory of the selected candidate (a Tune checkpoint or the warm-start module)."""
        return str(self.row(self.selected)["path"])

    def summary(self) -> dict[str, float]:
        """Validation grades of the warm start, the last checkpoint and the selected candidate
        (flat ``validation/*`` keys, for printing and for the training run's MLflow metrics)."""
        out: dict[str, float] = {}
        warm = self.row(WARM_START)
        if warm is not None:
            out["validation/warm_start_score"] = float(warm["val_score_mean"])
        last = self.table[-1]
        if last["candidate"] != WARM_START:
            out["validation/final_score"] = float(last["val_score_mean"])
        out["validation/selected_score"] = float(self.row(self.selected)["val_score_mean"])
        out["validation/selected_is_warm_start"] = float(self.is_warm_start)
        return out


def select_policy(task_id: str, *, last_checkpoint: str | Path, warm_start_dir: str | Path | None,
                  episodes: int, seed: int = VALIDATION_SEED) -> Selection:
    """Evaluate the warm start and every kept checkpoint on ``episodes`` validation seeds from ``seed``."""
    cands: list[tuple[str, Path]] = []
    if warm_start_dir is not None:
        cands.append((WARM_START, Path(warm_start_dir)))
    cands += [(ck.name, ck) for ck in trial_checkpoints(last_checkpoint)]
    if not cands:
        raise ValueError(f"nothing to select from: no checkpoints next to {last_checkpoint}")
    table, policies = [], []
    for name, path in cands:
        pol = load_checkpoint(path, task_id)
        row = evaluate_one(pol, task_id, episodes=episodes, seed=seed, name=name)
        table.append({"candidate": name, "path": str(path), "val_score_mean": row["score_mean"],
                      "val_score_ci95": row["score_ci95"], "val_ttft_p99_s": row.get("ttft_p99_s")})
        policies.append(pol)
    best = max(range(len(table)), key=lambda i: (table[i]["val_score_mean"], i))
    return Selection(selected=table[best]["candidate"], policy=policies[best], table=table,
                     val_episodes=episodes, val_seed=seed)
