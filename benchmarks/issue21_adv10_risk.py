"""Mega-prompt risk features and a risk-gated spell guard (issue 21, tenth session).

The ninth session's spell teacher (``issue21_adv_spell_policy.SpellPolicy``) drops the rule's mega-prompt guard
(KV 0.15 for 4 windows after a mega-prompt, ``low+mega``) for the rest of a spell where a regressor of the spell
label (``issue21_adv_spells.py``: ``q_drop - q_hold``) exceeds a margin. Its rare large losses come from a
second mega-prompt arriving while the guard is down. Mega-prompts are a Poisson process (0.4/s, the public
spec) kept only where the sinusoid is in its low half, so the observable predictor of "a mega-prompt in the
next k windows" is the posterior probability that those windows are in the low half. :class:`RiskTracker`
computes it from the observation history only:

- the posterior over the sinusoid's phase offset: the rule detector's Poisson log-likelihood of the
  (mega-free) arrival counts, plus what the detector ignores: every window that held a mega-prompt was in the
  low half (a window whose middle lies clearly in the high half gets a log-penalty);
- from it, ``p_low[j]``: the probability that window ``k + j`` (``k`` = the next window) is in the low half,
  j = 0..5, and the expected mega-prompts in the next 4 windows (0.4/s x window x sum of ``p_low``);
- the posterior's spread (1 - |E exp(i phi)|), mega-prompts seen in the last 10 and 30 windows.

:class:`RiskSpellPolicy` is the spell guard of the ninth session (optionally on these extended features): the
module plays, and in ``low+mega`` windows the guard is held unless the predicted spell advantage exceeds ``margin``
and (optionally) the posterior probability that the window 3 windows on is still in the low half is at least
``min_low`` (on training labels, drops just before the loud half lose); once dropped, the guard stays down until
the next mega-prompt. Nothing privileged is read when it acts.

    python benchmarks/issue21_adv10_risk.py fit --labels ray_results/adv10_spells --model M.pt --json-out J.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from inferencegym.envs.actions import ServeAction  # noqa: E402
from inferencegym.envs.phase_detector import PHI_GRID, PhaseDetector  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402
from inferencegym.rl.advantage_fit import AdvantageModel  # noqa: E402
from issue21_adv_spell_policy import SpellPolicy, features as base_features  # noqa: E402

TASK = "adversarial_multitenant"
N_AHEAD = 6
RISK_DIM = N_AHEAD + 4
"""Extra features: p_low[0..5], expected mega-prompts in the next 4 windows, posterior spread, mega-prompts in
the last 10 windows / 3, in the last 30 windows / 5."""
HIGH_PENALTY = float(np.log(0.02))
"""Log-likelihood added to a phase offset for each mega-prompt window whose middle it puts at sine > 0.2."""


class RiskTracker:
    """Observation history -> mega-prompt risk features (module docstring); mirrors a ``PhaseDetector``."""

    def __init__(self, detector: PhaseDetector):
        self.det = detector
        w = detector.task.workload
        self.mega_rate = float(w.mega_prompt_rate_per_s) * detector.window_s
        self.reset()

    def reset(self) -> None:
        self.pen = np.zeros_like(PHI_GRID)
        self.megas: list[int] = []

    def update(self, obs) -> None:
        """Call right after ``detector.update(obs)`` with the same observation."""
        d = self.det
        if d.k == 0:   # reset's observation or a new episode
            self.reset()
            return
        if d._since_mega == 0:
            i = d.k - 1   # the window just read
            s = np.sin(d._omega * (i + 0.5) * d.window_s + PHI_GRID)
            self.pen += np.where(s > 0.2, HIGH_PENALTY, 0.0)
            self.megas.append(i)

    def features(self) -> np.ndarray:
        d = self.det
        out = np.zeros(RISK_DIM, np.float32)
        if d.k == 0:
            out[:N_AHEAD] = 0.5
            out[N_AHEAD] = self.mega_rate * 4 * 0.5
            out[N_AHEAD + 1] = 1.0
            return out
        lp = d._loglik + self.pen
        p = np.exp(lp - lp.max())
        p /= p.sum()
        t = (d.k + 0.5 + np.arange(N_AHEAD)) * d.window_s
        low = np.sin(d._omega * t[:, None] + PHI_GRID[None, :]) <= 0.0
        out[:N_AHEAD] = low @ p
        out[N_AHEAD] = self.mega_rate * out[:4].sum()
        out[N_AHEAD + 1] = 1.0 - abs(complex(np.cos(PHI_GRID) @ p, np.sin(PHI_GRID) @ p))
        m = np.asarray(self.megas)
        out[N_AHEAD + 2] = min(int((m >= d.k - 10).sum()), 3) / 3.0 if len(m) else 0.0
        out[N_AHEAD + 3] = min(int((m >= d.k - 30).sum()), 5) / 5.0 if len(m) else 0.0
        return out


def replay_features(traj_obs: np.ndarray, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(level-2 phase features, risk features) at decision windows ``windows`` of an episode whose
    observations were ``traj_obs`` (``traj_obs[w]`` read at window ``w``), replayed through the rule's detector."""
    rule = PhaseRulePolicy(TASK)
    rule.reset(0)
    tr = RiskTracker(rule.detector)
    want = set(int(w) for w in windows)
    f2, fr = {}, {}
    for w in range(int(max(want)) + 1):
        rule.detector.update(traj_obs[w])
        tr.update(traj_obs[w])
        if w in want:
            f2[w] = rule.detector.features(level=2)
            fr[w] = tr.features()
    return np.stack([f2[int(w)] for w in windows]), np.stack([fr[int(w)] for w in windows])


def load(dirs: list[Path]) -> dict[str, np.ndarray]:
    cols: dict[str, list] = {k: [] for k in ("x", "risk", "y", "ep", "w", "dropped_before", "kv_played", "seed")}
    files = sorted(p for d in dirs for p in d.glob(f"{TASK}_*.npz"))
    for i, p in enumerate(files):
        d = np.load(p)
        if len(d["w"]) == 0:
            continue
        f2, fr = replay_features(d["traj_obs"], d["w"])
        if not np.allclose(f2, d["feat"], atol=1e-5):
            raise RuntimeError(f"{p}: replayed phase features differ from the labelled ones")
        cols["x"].append(base_features(d["feat"], d["obs"]))
        cols["risk"].append(fr)
        cols["y"].append((d["q_drop"] - d["q_hold"]).astype(np.float32))
        cols["ep"].append(np.full(len(d["w"]), i))
        cols["w"].append(d["w"])
        cols["dropped_before"].append(d["dropped_before"])
        cols["kv_played"].append(d["kv_played"])
        cols["seed"].append(np.full(len(d["w"]), int(p.stem.split("_")[-1])))
    out = {k: np.concatenate(v) for k, v in cols.items()}
    out["files"] = len(files)
    return out


def spell_sim(d: dict, drop: np.ndarray) -> np.ndarray:
    """Per-episode sum of labels at the first window of each spell where ``drop`` is true (a replace-mode guard
    played on the labelled states: off-policy, a ranking of gates, not grades)."""
    eps = np.unique(d["ep"])
    out = np.zeros(len(eps))
    spell_id = d["w"] - np.round(d["x"][:, 6] * 10)
    for j, e in enumerate(eps):
        idx = np.flatnonzero(d["ep"] == e)
        taken = set()
        for i in idx:
            s = spell_id[i]
            if s in taken or not drop[i]:
                continue
            taken.add(s)
            out[j] += d["y"][i]
    return out


def summarize(v: np.ndarray) -> str:
    lb = v.mean() - 0.468 * v.std(ddof=1)   # the expected 20-seed lower bound in per-episode label units
    return f"mean {v.mean():+.3f} sd {v.std(ddof=1):.3f} p5 {np.percentile(v, 5):+.3f} worst {v.min():+.3f} lb20 {lb:+.3f}"


def fit(args) -> None:
    d = load(args.labels)
    y, ep = d["y"], d["ep"]
    report = {"episodes": int(d["files"]), "windows": int(len(y)), "drop_pays": float((y > 0).mean()),
              "mean": float(y.mean()), "rows": []}
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))
    xb = d["x"]
    xe = np.concatenate([d["x"], d["risk"]], axis=1)
    folds = ep % 3
    first = d["dropped_before"] < 0.5
    mod = spell_sim(d, (d["kv_played"] > 0.5) & first)
    print(f"module's own drops: {summarize(mod)}")
    report["module_drops"] = summarize(mod)
    for ref in args.ref or []:   # an existing regressor (e.g. the ninth session's teacher), not refitted
        m = AdvantageModel.load(ref)
        pr = m.predict(xe if len(m.cols) > 14 else xb)[:, 0]
        row = {"model": f"ref {ref}", "corr": float(np.corrcoef(pr, y)[0, 1])}
        for mg in args.margins:
            gate = pr > mg
            row[f"margin {mg}"] = summarize(spell_sim(d, gate)) + f" drop {gate.mean():.1%}"
            print(f"ref {ref} corr {row['corr']:+.3f} margin {mg}: {row[f'margin {mg}']}", flush=True)
        report["rows"].append(row)
    variants = {"base14_c2": (xb, -2.0, 2.0), "risk24_c2": (xe, -2.0, 2.0), "base14_a41": (xb, -4.0, 1.0),
                "risk24_a41": (xe, -4.0, 1.0), "base14_a81": (xb, -8.0, 1.0), "base14_a42": (xb, -4.0, 2.0)}
    for name, (x, lo, hi) in variants.items():
        if args.only and name not in args.only:
            continue
        yc = np.clip(y, lo, hi)[:, None]
        pr = np.zeros(len(y))
        for k in range(3):
            for e in range(args.ensemble):
                m = AdvantageModel(x.shape[1], 1, cols=np.arange(x.shape[1]), clip=1e9, hidden=args.hidden,
                                   seed=k + 10 * e)
                m.fit(x[folds != k], yc[folds != k], epochs=args.epochs)
                pr[folds == k] += m.predict(x[folds == k])[:, 0] / args.ensemble
        row = {"model": name, "clip": [lo, hi], "corr": float(np.corrcoef(pr, y)[0, 1])}
        print(f"{name}: corr {row['corr']:+.3f}", flush=True)
        for mg in args.margins:
            gate = pr > mg
            v = spell_sim(d, gate)
            row[f"margin {mg}"] = summarize(v) + f" drop {gate.mean():.1%}"
            print(f"  margin {mg}: {row[f'margin {mg}']}", flush=True)
        report["rows"].append(row)
        if args.model:
            for e in range(args.ensemble):
                m = AdvantageModel(x.shape[1], 1, cols=np.arange(x.shape[1]), clip=1e9, hidden=args.hidden, seed=10 * e)
                m.fit(x, yc, epochs=args.epochs)
                out = args.model.with_name(args.model.stem + f"_{name}" + (f"_e{e}" if args.ensemble > 1 else "") + ".pt")
                m.save(out)
                print(f"wrote {out}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "benchmarks/issue21_adv10_risk.py " + " ".join(sys.argv[1:]),
                                             **report}, indent=1))


class Ensemble:
    """The mean prediction of several :class:`AdvantageModel` (same inputs)."""

    def __init__(self, models: list[AdvantageModel]):
        self.models = models
        self.cols = models[0].cols

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.mean([m.predict(x) for m in self.models], axis=0)


class RiskSpellPolicy(SpellPolicy):
    """The module; the ``low+mega`` guard decided by a spell-advantage regressor on the 14 base features plus
    (when the model reads 24) the risk features, gated by the expected mega-prompts (module docstring)."""

    def __init__(self, module, model: AdvantageModel, margin: float, min_low: float = 0.0):
        super().__init__(module, model, margin, "replace")
        self.min_low = float(min_low)
        self.tracker = RiskTracker(self.rule.detector)
        self.risk = len(model.cols) > 14 or int(np.max(model.cols)) >= 14

    def reset(self, seed=None):
        super().reset(seed)
        self.tracker.reset()

    def _observe(self, obs) -> None:
        self.tracker.update(obs)

    def _drop(self, f: np.ndarray, obs: np.ndarray, a: ServeAction) -> bool:
        x = base_features(f, obs)
        r = self.tracker.features()
        if self.risk:
            x = np.concatenate([x, r[None, :]], axis=1)
        return float(self.model.predict(x)[0, 0]) > self.margin and r[3] >= self.min_low


def make_risk_actor(spec: str, module):
    """``risk:MODEL.pt[+MODEL2.pt...]@MARGIN[@MIN_LOW]`` on ``module`` (several models: their mean)."""
    paths, _, rest = spec.removeprefix("risk:").partition("@")
    margin, _, risk = rest.partition("@")
    for path in paths.split("+"):
        if not Path(path).is_file():
            raise ValueError(f"risk spec {spec!r}: no regressor file {path!r}")
    models = [AdvantageModel.load(p) for p in paths.split("+")]
    try:
        return RiskSpellPolicy(module, models[0] if len(models) == 1 else Ensemble(models), float(margin),
                               float(risk) if risk else 0.0)
    except ValueError:
        raise ValueError(f"risk spec {spec!r}: expected risk:MODEL.pt@MARGIN[@MIN_LOW] with numbers") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit")
    f.add_argument("--labels", type=Path, nargs="+", required=True)
    f.add_argument("--model", type=Path, default=None, help="write MODEL_<variant>.pt (fitted on all labels)")
    f.add_argument("--only", nargs="*", default=None)
    f.add_argument("--hidden", type=int, default=32)
    f.add_argument("--ensemble", type=int, default=1, help="average this many regressors (seeds) per fit")
    f.add_argument("--ref", type=Path, nargs="*", default=None, help="existing regressors to score on the labels")
    f.add_argument("--margins", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3])
    f.add_argument("--epochs", type=int, default=60)
    f.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    fit(args)


if __name__ == "__main__":
    main()
