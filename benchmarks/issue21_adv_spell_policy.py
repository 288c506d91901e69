"""The shipped adversarial module with a fitted spell-level guard decision (issue 21, ninth session).

``issue21_adv_spells.py`` labels, at ``low+mega`` windows (the rule's mega-prompt guard), the value of
dropping the guard for the rest of the spell minus holding it. A regressor of that label on observable
features (the rule detector's level-2 phase features and six raw observation columns) decides the guard
in :class:`SpellPolicy`; the module plays every other window and every other knob. Modes:

- ``replace``: hold the guard unless the predicted advantage of dropping exceeds ``margin``; once
  dropped, stay dropped until the next mega-prompt (the labelled candidate);
- ``veto``: the module's own choice, except a drop whose predicted advantage is below ``-margin``;
- ``add``: the module's choice, plus a drop (for the rest of the spell) where the prediction exceeds ``margin``.

Fit: ``python benchmarks/issue21_adv_spell_policy.py fit --labels DIR --model M.pt``. Actor specs (``spell:MODEL@MARGIN[@MODE]``
and the others): ``issue21_adv_actors.make_actor``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from inferencegym.envs.actions import ServeAction  # noqa: E402
from inferencegym.rl.advantage_fit import COMPACT_COLS, AdvantageModel  # noqa: E402
from issue21_adv10_guards import ModuleBesideTheRule  # noqa: E402

TASK = "adversarial_multitenant"
FEAT_DIM = 8


def features(feat: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """(N, 14): level-2 phase features, then raw observation columns ``COMPACT_COLS``."""
    feat, obs = np.atleast_2d(feat), np.atleast_2d(obs)
    return np.concatenate([feat, obs[:, list(COMPACT_COLS)]], axis=1).astype(np.float32)


class SpellPolicy(ModuleBesideTheRule):
    """The module; the ``low+mega`` guard decided by a spell-advantage regressor (see module docstring)."""

    def __init__(self, module, model: AdvantageModel, margin: float, mode: str = "replace"):
        if mode not in ("replace", "veto", "add"):
            raise ValueError(f"mode must be replace, veto or add; got {mode!r}")
        super().__init__(module)
        self.model, self.margin, self.mode = model, float(margin), mode

    def reset(self, seed=None):
        super().reset(seed)
        self.w, self.spell, self.dropped = 0, None, False

    def act(self, obs, info=None):
        a = self._actions(obs, info)[0]
        self._observe(obs)
        w, self.w = self.w, self.w + 1
        if self.rule.detector.forecast() != "low+mega":
            return a
        f = self.rule.detector.features(level=2)
        start = w - round(float(f[6]) * 10)
        if start != self.spell:
            self.spell, self.dropped = start, False
        if self.dropped:
            return a.model_copy(update={"kv_budget_fraction": 0.9})
        drop = self._drop(f, np.asarray(obs, np.float32).reshape(-1), a)
        if drop and self.mode != "veto":
            self.dropped = True
        return a.model_copy(update={"kv_budget_fraction": 0.9 if drop else 0.15})

    def _observe(self, obs) -> None:
        """Hook: every observation, after the rule has read it (nothing here)."""

    def _drop(self, f: np.ndarray, obs: np.ndarray, a: ServeAction) -> bool:
        """Whether to drop the guard in this ``low+mega`` window (level-2 features ``f``, flat ``obs``)."""
        pred = float(self.model.predict(features(f, obs))[0, 0])
        mod_drops = a.kv_budget_fraction > 0.5
        if self.mode == "replace":
            return pred > self.margin
        if self.mode == "veto":
            return mod_drops and pred >= -self.margin
        return mod_drops or pred > self.margin


def load(dirs: list[Path], tags: list[str] | None = None) -> dict[str, np.ndarray]:
    xs, ys, eps, dropped, kvp = [], [], [], [], []
    files = sorted(p for d in dirs for p in d.glob(f"{TASK}_*.npz")
                   if tags is None or p.stem.split("_")[-2] in tags)
    for i, p in enumerate(files):
        d = np.load(p)
        if len(d["w"]) == 0:
            continue
        xs.append(features(d["feat"], d["obs"]))
        ys.append(d["q_drop"] - d["q_hold"])
        eps.append(np.full(len(d["w"]), i))
        dropped.append(d["dropped_before"])
        kvp.append(d["kv_played"])
    return {"x": np.concatenate(xs), "y": np.concatenate(ys).astype(np.float32), "ep": np.concatenate(eps),
            "dropped_before": np.concatenate(dropped), "kv_played": np.concatenate(kvp), "files": len(files)}


def fit(args) -> None:
    d = load(args.labels)
    keep = d["dropped_before"] < 0.5 if args.undropped_only else np.ones(len(d["y"]), bool)
    x, y, ep = d["x"][keep], d["y"][keep], d["ep"][keep]
    report = [f"{d['files']} episodes, {len(y)} labelled windows; drop pays in {(y > 0).mean():.2%}, mean {y.mean():+.3f}"]
    print(report[0])
    cols = np.arange(x.shape[1])
    # 3-fold CV by episode: the labels summed where the held-out prediction exceeds m, per episode
    # (one-window sums: they overlap within a spell, so they rank margins, they are not grades)
    folds = ep % 3
    for clip in args.clips:
        preds = np.zeros(len(y))
        for k in range(3):
            m = AdvantageModel(x.shape[1], 1, cols=cols, clip=clip, hidden=args.hidden, seed=k)
            m.fit(x[folds != k], y[folds != k, None], epochs=args.epochs)
            preds[folds == k] = m.predict(x[folds == k])[:, 0]
        n_ep = len(np.unique(ep))
        line = [f"clip {clip}: corr {np.corrcoef(preds, y)[0, 1]:+.3f}"]
        for mg in (-0.2, 0.0, 0.1, 0.2, 0.4):
            sel = preds > mg
            line.append(f"m{mg:+.1f}: drop {sel.mean():.0%} gain/ep {y[sel].sum() / n_ep:+.3f}")
        line.append(f"module's drops gain/ep {y[d['kv_played'][keep] > 0.5].sum() / n_ep:+.3f}")
        report.append("; ".join(line))
        print(report[-1], flush=True)
    m = AdvantageModel(x.shape[1], 1, cols=cols, clip=args.clips[0], hidden=args.hidden, seed=0)
    m.fit(x, y[:, None], epochs=args.epochs)
    m.save(args.model)
    print(f"wrote {args.model} (clip {args.clips[0]})")
    if args.json_out:
        import json

        args.json_out.write_text(json.dumps({"command": "benchmarks/issue21_adv_spell_policy.py " + " ".join(sys.argv[1:]),
                                             "cross_validation": report}, indent=1))


def add_fit_args(f: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments of the issue-21 adversarial scripts' ``fit`` commands (labels in, regressor out)."""
    f.add_argument("--labels", type=Path, nargs="+", required=True)
    f.add_argument("--model", type=Path, required=True)
    f.add_argument("--clips", type=float, nargs="+", default=[1.0])
    f.add_argument("--hidden", type=int, default=32)
    f.add_argument("--epochs", type=int, default=60)
    f.add_argument("--json-out", type=Path, default=None)
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = add_fit_args(sub.add_parser("fit"))
    f.add_argument("--undropped-only", action="store_true")
    args = ap.parse_args()
    if args.cmd == "fit":
        fit(args)


if __name__ == "__main__":
    main()
