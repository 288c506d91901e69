"""One-step rollout advantages over all knobs on the shipped adversarial module's own states (issue 21, tenth
session b).

The fourth session labelled ``phase_rule``'s states with each candidate configuration's rollout value (the rule
continuing); the ninth/tenth sessions labelled only the module's guard drop. Here every ``--every``-th window of an
episode played by ``--actor`` (the shipped module) is labelled with each candidate of
``rollout_labels.candidate_actions`` (split x KV budget, the knobs any rule or module varies on this task): the
candidate is played on an exact env copy (``copy.deepcopy``, common random numbers), then the actor continues for
``--horizon`` windows. The actor's own action needs no rollout: the episode itself is that rollout (the env and the
actor are deterministic), so its value is the episode's own reward sum over the same windows (checked against a
rollout on the first labelled window of each episode). Label: ``q[c] - q[actor's action]``.

Observable features stored beside it (decision time only): the rule detector's level-2 phase features, the raw
observation's ``COMPACT_COLS`` and the actor's action as a one-hot over the candidates. Training seeds only (< 500).

- ``issue21_adv10b_cli.py label --seeds 100 80 --out DIR``: one ``.npz`` per seed (atomic; a stopped run resumes);
- ``issue21_adv10b_cli.py fit --labels DIR --model M.pt``: 3-fold CV by episode of an ``AdvantageModel`` (4
  outputs), then the full fit;
- :class:`AllKnobPolicy` (spec ``allknob:M.pt@MARGIN`` of ``issue21_adv_actors.make_actor``): the module,
  switched to the candidate with the largest predicted advantage where it exceeds ``MARGIN``.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from inferencegym.envs.actions import ServeAction  # noqa: E402
from inferencegym.envs.serve_env import LLMServeEnv  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402
from inferencegym.rl.advantage_fit import COMPACT_COLS, AdvantageModel  # noqa: E402
from inferencegym.rl.rollout_labels import GRADE_REWARD, candidate_actions, rollout_return  # noqa: E402
from issue21_adv10_guards import ModuleBesideTheRule  # noqa: E402

TASK = "adversarial_multitenant"
CANDS = candidate_actions(TASK)
INDEX = {a: i for i, a in enumerate(CANDS)}


def features(feat: np.ndarray, obs: np.ndarray, act_idx: np.ndarray) -> np.ndarray:
    """(N, 18): level-2 phase features, raw ``COMPACT_COLS``, the actor's candidate as a one-hot."""
    feat, obs = np.atleast_2d(feat), np.atleast_2d(obs)
    onehot = np.eye(len(CANDS), dtype=np.float32)[np.atleast_1d(act_idx).astype(int)]
    return np.concatenate([feat, obs[:, list(COMPACT_COLS)], onehot], axis=1).astype(np.float32)


NEIGHBOURS: tuple[tuple[str, object], ...] = (
    ("batch_cap", 128), ("batch_cap", 512), ("speculation_depth", 1), ("speculation_depth", 4),
    ("quantization_tier", "INT8"), ("priority_routing", False), ("prefill_decode_split", None),
    ("kv_budget_fraction", None))
"""One-knob changes of the actor's action screened by ``label --neighbours`` (``None``: flip the split / swap KV
0.15 and 0.9): the knobs no rule or module varies on this task (batch cap 256, speculation 2, FP16, priority on)
and the two they vary."""


def neighbour(a: ServeAction, knob: str, value) -> ServeAction:
    if knob == "prefill_decode_split":
        value = not a.prefill_decode_split
    elif knob == "kv_budget_fraction":
        value = 0.9 if a.kv_budget_fraction < 0.5 else 0.15
    return a.model_copy(update={knob: value})


def _walk(actor, seed: int, horizon: int, every: int, values) -> tuple[dict[str, list], np.ndarray, LLMServeEnv]:
    """One episode played by ``actor`` (``phase_rule`` shadowing it for the phase features). At every
    ``every``-th window, ``values(before, env, obs, info, a)`` (``before``: the actor as it was before it read
    this window) returns the labelled row's values (None: the window is not labelled). Returns the rows
    (``w``, ``feat``, ``obs``, ``act``, ``q``, ``phase``), the cumulative rewards and the finished env."""
    env = LLMServeEnv(TASK, reward_config=GRADE_REWARD)
    rule = PhaseRulePolicy(TASK)
    actor.reset(seed)
    rule.reset(seed)
    obs, info = env.reset(seed=seed)
    rows: dict[str, list] = {k: [] for k in ("w", "feat", "obs", "act", "q", "phase")}
    rewards, w = [], 0
    while True:
        before = copy.deepcopy(actor)
        a = ServeAction.from_any(actor.act(obs, info))
        rule.act(obs, info)
        q = values(before, env, obs, info, a) if w % every == 0 else None
        if q is not None:
            rows["w"].append(w)
            rows["feat"].append(rule.detector.features(level=2))
            rows["obs"].append(np.asarray(obs, np.float32).reshape(-1))
            rows["act"].append(INDEX.get(a, -1))
            rows["q"].append(q)
            rows["phase"].append(PHASES.index(rule.detector.forecast()))
        obs, r, term, trunc, info = env.step(a)
        rewards.append(float(r))
        w += 1
        if term or trunc:
            break
    return rows, np.r_[0.0, np.cumsum(rewards)], env


def _label_arrays(rows: dict[str, list], env: LLMServeEnv, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    out = {k: np.asarray(rows[k], np.float64 if k == "q" else np.float32) for k in keys}
    out["act"] = np.asarray(rows["act"], np.int64)
    if "phase" in keys:
        out["phase"] = np.asarray(rows["phase"], np.int64)
    out["score"] = np.float64(env.grade().score)
    return out


PHASES = ("low", "low+mega", "high", "high+mega")
"""The rule detector's forecast phases, in the order the ``phase`` label column indexes them."""


def label_neighbours(actor, seed: int, horizon: int, every: int) -> dict[str, np.ndarray]:
    """``q[:, 0]`` the actor's own return over ``horizon`` windows, ``q[:, 1 + k]`` that of ``NEIGHBOURS[k]``."""

    def values(before, env, obs, info, a):
        q = np.full(1 + len(NEIGHBOURS), np.nan)
        for k, (knob, v) in enumerate(NEIGHBOURS):
            m = copy.deepcopy(before)
            m.act(obs, info)
            q[1 + k] = rollout_return(copy.deepcopy(env), neighbour(a, knob, v), m, horizon)
        return q

    rows, cum, env = _walk(actor, seed, horizon, every, values)
    n = len(cum) - 1
    for k, wk in enumerate(rows["w"]):
        rows["q"][k][0] = cum[min(wk + horizon, n)] - cum[wk]
    return _label_arrays(rows, env, ("w", "feat", "obs", "act", "q", "phase"))


def label_episode(actor, seed: int, horizon: int, every: int) -> dict[str, np.ndarray]:
    checked: list[float] = []  # the rollout value of the actor's own action at the first labelled window

    def values(before, env, obs, info, a):
        i = INDEX.get(a, -1)
        if i < 0:
            return None
        q = np.full(len(CANDS), np.nan)
        for c, cand in enumerate(CANDS):
            if c == i and checked:
                continue  # filled from the episode's own rewards below
            m = copy.deepcopy(before)
            m.act(obs, info)  # the continuation has read this window, whatever is played
            q[c] = rollout_return(copy.deepcopy(env), cand, m, horizon)
        if not checked:
            checked.append(float(q[i]))
        return q

    rows, cum, env = _walk(actor, seed, horizon, every, values)
    n = len(cum) - 1
    for k, wk in enumerate(rows["w"]):
        own = cum[min(wk + horizon, n)] - cum[wk]
        if k == 0 and abs(own - checked[0]) > 1e-9:
            raise RuntimeError(f"seed {seed}: the episode's own return {own} differs from its rollout {checked[0]}")
        rows["q"][k][rows["act"][k]] = own
    return _label_arrays(rows, env, ("w", "feat", "obs", "act", "q"))


def load(dirs: list[Path]) -> dict[str, np.ndarray]:
    xs, ys, eps, acts = [], [], [], []
    files = sorted(p for d in dirs for p in d.glob(f"{TASK}_*.npz"))
    if not files:
        raise SystemExit(f"no label files {TASK}_*.npz in {', '.join(map(str, dirs))}: write them with "
                         f"`python benchmarks/issue21_adv10b_cli.py label --out DIR` and pass that DIR")
    for e, p in enumerate(files):
        d = np.load(p)
        if len(d["w"]) == 0:
            continue
        q = d["q"]
        xs.append(features(d["feat"], d["obs"], d["act"]))
        ys.append(q - q[np.arange(len(q)), d["act"]][:, None])
        eps.append(np.full(len(q), e))
        acts.append(d["act"])
    return {"x": np.concatenate(xs), "y": np.concatenate(ys).astype(np.float32), "ep": np.concatenate(eps),
            "act": np.concatenate(acts), "files": len(files)}


def _cv_predictions(x: np.ndarray, y: np.ndarray, folds: np.ndarray, cols: np.ndarray, clip: float, args) -> np.ndarray:
    """Held-out predictions of 3-fold cross-validation by episode (``folds``: the episode's fold)."""
    preds = np.zeros_like(y)
    for k in range(3):
        m = AdvantageModel(x.shape[1], y.shape[1], cols=cols, clip=clip, hidden=args.hidden, seed=k)
        m.fit(x[folds != k], y[folds != k], epochs=args.epochs)
        preds[folds == k] = m.predict(x[folds == k])
    return preds


def _final_fit(x: np.ndarray, y: np.ndarray, cols: np.ndarray, report: list[str], args) -> None:
    """The model on every label (the first clip), saved to ``args.model``; the CV report to ``args.json_out``."""
    m = AdvantageModel(x.shape[1], y.shape[1], cols=cols, clip=args.clips[0], hidden=args.hidden, seed=0)
    m.fit(x, y, epochs=args.epochs)
    m.save(args.model)
    print(f"wrote {args.model} (clip {args.clips[0]})")
    if args.json_out:
        args.json_out.write_text(json.dumps({"command": "benchmarks/issue21_adv10b_cli.py " + " ".join(sys.argv[1:]),
                                             "cross_validation": report}, indent=1))


def fit(args) -> None:
    d = load(args.labels)
    x, y, ep = d["x"], d["y"], d["ep"]
    n_ep = len(np.unique(ep))
    report = [f"{d['files']} episodes, {len(y)} labelled windows; some candidate beats the actor in "
              f"{(y.max(axis=1) > 1e-9).mean():.1%}; mean best advantage {y.max(axis=1).mean():+.3f}; "
              f"hindsight best summed per episode {y.max(axis=1).sum() / n_ep:+.2f}"]
    print(report[0], flush=True)
    cols = np.arange(x.shape[1])
    folds = ep % 3
    for clip in args.clips:
        preds = _cv_predictions(x, y, folds, cols, clip, args)
        off = np.ones_like(y, bool)
        off[np.arange(len(y)), d["act"]] = False  # the actor's own column is 0 by construction
        line = [f"clip {clip}: corr (other candidates) {np.corrcoef(preds[off], y[off])[0, 1]:+.3f}"]
        pm = np.where(off, preds, -np.inf)
        best = pm.argmax(axis=1)
        gain = pm[np.arange(len(y)), best]
        for mg in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5):
            sel = gain > mg
            line.append(f"m{mg:.2f}: switch {sel.mean():.1%} gain/ep {y[sel, best[sel]].sum() / n_ep:+.3f}")
        report.append("; ".join(line))
        print(report[-1], flush=True)
    _final_fit(x, y, cols, report, args)


class _AdvantageSwitch(ModuleBesideTheRule):
    """The module beside the rule (whose detector's features are the advantage model's inputs), and a regressor
    of advantages with the margin a switch must exceed."""

    def __init__(self, module, model: AdvantageModel, margin: float):
        super().__init__(module)
        self.model, self.margin = model, float(margin)


class AllKnobPolicy(_AdvantageSwitch):
    """The module, switched to the candidate with the largest predicted advantage over the module's own action
    where that prediction exceeds ``margin`` (observable inputs only)."""

    def act(self, obs, info=None):
        a = self._actions(obs, info)[0]
        i = INDEX.get(a)
        if i is None:
            return a
        pred = self.model.predict(features(self.rule.detector.features(level=2),
                                           np.asarray(obs, np.float32).reshape(-1), np.asarray([i])))[0]
        pred[i] = -np.inf
        best = int(np.argmax(pred))
        return CANDS[best] if pred[best] > self.margin else a


def nb_features(feat, obs, act_idx, phase) -> np.ndarray:
    """(N, 22): :func:`features` plus the rule's forecast phase as a one-hot (low, low+mega, high, high+mega)."""
    ph = np.eye(4, dtype=np.float32)[np.atleast_1d(phase).astype(int)]
    return np.concatenate([features(feat, obs, np.maximum(np.atleast_1d(act_idx), 0)), ph], axis=1)


def fit_nb(args) -> None:
    """Neighbour labels (``label --neighbours``): CV by episode of an ``AdvantageModel`` with one output per
    neighbour, then the full fit."""
    xs, ys, eps = [], [], []
    files = sorted(p for d in args.labels for p in d.glob(f"{TASK}_*.npz"))
    for e, p in enumerate(files):
        d = np.load(p)
        xs.append(nb_features(d["feat"], d["obs"], d["act"], d["phase"]))
        ys.append(d["q"][:, 1:] - d["q"][:, :1])
        eps.append(np.full(len(d["q"]), e))
    x, y, ep = np.concatenate(xs), np.concatenate(ys).astype(np.float32), np.concatenate(eps)
    n_ep = len(files)
    report = [f"{n_ep} episodes, {len(y)} labelled windows (every 4th); a neighbour beats the actor in "
              f"{(y.max(axis=1) > 1e-9).mean():.1%}"]
    print(report[0], flush=True)
    folds = ep % 3
    cols = np.arange(x.shape[1])
    for clip in args.clips:
        preds = _cv_predictions(x, y, folds, cols, clip, args)
        best = preds.argmax(axis=1)
        gain = preds[np.arange(len(y)), best]
        line = [f"clip {clip}: corr {np.corrcoef(preds.ravel(), y.ravel())[0, 1]:+.3f}"]
        for mg in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5):
            sel = gain > mg
            line.append(f"m{mg:.2f}: switch {sel.mean():.1%} gain/ep {y[sel, best[sel]].sum() / n_ep:+.3f} "
                        f"(~{y[sel, best[sel]].sum() / n_ep * 4 / 200:+.4f} grade)")
        report.append("; ".join(line))
        print(report[-1], flush=True)
    _final_fit(x, y, cols, report, args)


class NeighbourPolicy(_AdvantageSwitch):
    """The module, with the one-knob change (``NEIGHBOURS``) of largest predicted advantage applied where that
    prediction exceeds ``margin`` (spec ``nb:MODEL.pt@MARGIN``; observable inputs only)."""

    phases = ("low", "low+mega", "high", "high+mega")

    def act(self, obs, info=None):
        a = self._actions(obs, info)[0]
        x = nb_features(self.rule.detector.features(level=2), np.asarray(obs, np.float32).reshape(-1),
                        np.asarray([INDEX.get(a, -1)]), np.asarray([self.phases.index(self.rule.detector.forecast())]))
        pred = self.model.predict(x)[0]
        k = int(np.argmax(pred))
        return neighbour(a, *NEIGHBOURS[k]) if pred[k] > self.margin else a


class KnobOverride(ModuleBesideTheRule):
    """The module with knobs set per forecast phase of the rule's detector (spec
    ``knob:PHASES:KNOB=VALUE[,KNOB=VALUE]`` with ``PHASES`` a ``/``-list of low, low+mega, high, high+mega or ``all``;
    several specs joined by ``;``). Observable: the rule's phase forecast."""

    def __init__(self, module, spec: str):
        super().__init__(module)
        self.rules = []
        for part in spec.removeprefix("knob:").split(";"):
            phases, _, sets = part.partition(":")
            upd = {}
            for kv in sets.split(","):
                k, _, v = kv.partition("=")
                upd[k] = {"True": True, "False": False}.get(v, v if k == "quantization_tier" else
                                                            (int(v) if k in ("batch_cap", "speculation_depth") else float(v)))
            names = ("low", "low+mega", "high", "high+mega") if phases == "all" else tuple(phases.split("/"))
            self.rules.append((names, upd))

    def act(self, obs, info=None):
        a, _, name = self._actions(obs, info)
        for names, upd in self.rules:
            if name in names:
                a = a.model_copy(update=upd)
        return a


class GBMModel:
    """Gradient-boosted regressors, one per candidate, as one ``predict(x) -> (N, C)``."""

    def __init__(self, models):
        self.models = models

    def predict(self, x):
        x = np.atleast_2d(x)
        return np.stack([m.predict(x) for m in self.models], axis=1)


def make_allknob_actor(spec: str, module) -> AllKnobPolicy:
    path, _, margin = spec.split(":", 1)[1].partition("@")
    if not Path(path).is_file():
        raise ValueError(f"allknob spec {spec!r}: no regressor file {path!r} (fit one with "
                         f"`issue21_adv10b_cli.py fit`)")
    try:
        m = float(margin)
    except ValueError:
        raise ValueError(f"allknob spec {spec!r}: expected allknob:MODEL.pt@MARGIN with a number as MARGIN") from None
    if spec.startswith("gbm:"):  # issue21_adv10b_gbm_cv.py's pickled regressors (a file this project wrote)
        import pickle

        with open(path, "rb") as fh:
            return AllKnobPolicy(module, GBMModel(pickle.load(fh)), m)
    return (NeighbourPolicy if spec.startswith("nb:") else AllKnobPolicy)(module, AdvantageModel.load(path), m)
