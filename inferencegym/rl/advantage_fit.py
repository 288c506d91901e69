"""Fit ``E[advantage | observation]`` from rollout labels and act on it (issue 21).

:mod:`inferencegym.rl.rollout_labels` records, at visited windows of training seeds, each candidate
configuration's rollout value minus ``phase_rule``'s: hindsight advantages, exact for the seed. A small
regressor on the student's own input (``HistoryStacker``: the last windows, their moving average and
the observable phase forecast) averages them over seeds into an estimate of the advantage the
*observation* predicts. :class:`AdvantagePolicy` plays ``phase_rule`` and switches to the candidate
with the largest predicted advantage where it exceeds ``margin`` (a one-step improvement of the rule
that reads no privileged input); :func:`relabel` writes its choices on recorded episodes as
demonstrations (``bc.demonstrations``, the same files as :mod:`inferencegym.rl.distill`), from which
the PPO actor is warm-started.

Determinism: the regressor's initial weights and minibatch order come from ``seed``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferencegym.envs.actions import ServeAction, action_to_flat
from inferencegym.envs.history import HistoryStacker
from inferencegym.policies import get_policy
from inferencegym.rl.rollout_labels import candidate_actions


def _stack(raw: np.ndarray, task_id: str, windows: int, level: int) -> np.ndarray:
    st = HistoryStacker(raw.shape[1], windows, 0.3, task_id, level)
    st.reset()
    return np.stack([st.push(o) for o in raw])


def load_labels(paths: list[Path], task_id: str, *, windows: int = 4, level: int = 2) -> dict[str, Any]:
    """Stacked student inputs ``x`` (N, F) and advantages over the rule ``adv`` (N, C) of every labelled
    window, with the episode index ``ep`` (N,) of each row."""
    xs, advs, eps = [], [], []
    for i, p in enumerate(paths):
        d = np.load(p)
        x = _stack(d["obs"], task_id, windows, level)
        q, rule = d["q"], d["rule"]
        rows = ~np.isnan(q).any(axis=1) & (rule >= 0)
        adv = q[rows] - q[rows, rule[rows]][:, None]
        xs.append(x[rows])
        advs.append(adv)
        eps.append(np.full(int(rows.sum()), i))
    if not xs:
        raise ValueError("no rollout-label files: run `python -m inferencegym.rl.rollout_labels` first")
    return {"x": np.concatenate(xs).astype(np.float32), "adv": np.concatenate(advs).astype(np.float32),
            "ep": np.concatenate(eps)}


class AdvantageModel:
    """MLP ``x -> predicted advantage per candidate`` with standardised inputs (torch, CPU)."""

    def __init__(self, dim: int, n_cands: int, *, hidden: int = 64, seed: int = 0,
                 cols: np.ndarray | None = None, clip: float = 1.0):
        import torch

        torch.manual_seed(seed)
        self.cols = np.arange(dim) if cols is None else np.asarray(cols)
        """Which input features the regressor reads (a compact subset of the student's stack)."""
        self.clip = float(clip)
        """Advantages are clipped to [-clip, clip] before fitting: the sign and size of small
        advantages matter, the rare very negative ones (a mega-prompt under the wrong KV budget)
        would otherwise dominate the squared error."""
        dim = len(self.cols)
        self.net = torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, n_cands))
        self.mu = np.zeros(dim, np.float32)
        self.sd = np.ones(dim, np.float32)
        self.seed = seed

    def fit(self, x: np.ndarray, adv: np.ndarray, *, epochs: int = 60, lr: float = 1e-3,
            weight_decay: float = 1e-3, batch: int = 256) -> list[float]:
        """Mean-squared error on every candidate's advantage; returns the per-epoch loss."""
        import torch

        x = x[:, self.cols]
        adv = np.clip(adv, -self.clip, self.clip)
        self.mu = x.mean(axis=0)
        self.sd = np.maximum(x.std(axis=0), 1e-3).astype(np.float32)
        xt = torch.as_tensor((x - self.mu) / self.sd)
        yt = torch.as_tensor(adv)
        opt = torch.optim.AdamW(self.net.parameters(), lr=lr, weight_decay=weight_decay)
        rng = np.random.default_rng(self.seed)
        losses = []
        for _ in range(epochs):
            order = rng.permutation(len(xt))
            tot = 0.0
            for s in range(0, len(order), batch):
                idx = torch.as_tensor(order[s:s + batch])
                loss = ((self.net(xt[idx]) - yt[idx]) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                tot += float(loss.detach()) * len(idx)
            losses.append(tot / len(order))
        return losses

    def predict(self, x: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            z = (np.atleast_2d(x)[:, self.cols] - self.mu) / self.sd
            return self.net(torch.as_tensor(z.astype(np.float32))).numpy()

    def save(self, path: str | Path) -> None:
        import torch

        lin = [m for m in self.net if isinstance(m, torch.nn.Linear)]
        torch.save({"state": self.net.state_dict(), "mu": self.mu, "sd": self.sd, "cols": self.cols,
                    "clip": self.clip, "dim": int(self.cols.max()) + 1, "hidden": lin[0].out_features,
                    "n_cands": lin[-1].out_features}, str(path))

    @classmethod
    def load(cls, path: str | Path) -> "AdvantageModel":
        """A model written by :meth:`save` (a file this project wrote: it is unpickled)."""
        import torch

        blob = torch.load(str(path), weights_only=False)
        m = cls(blob["dim"], blob["n_cands"], hidden=blob["hidden"], cols=blob["cols"], clip=blob["clip"])
        m.net.load_state_dict(blob["state"])
        m.mu, m.sd = blob["mu"], blob["sd"]
        return m


class AdvantagePolicy:
    """``phase_rule``, switched to the candidate with the largest predicted advantage where it exceeds
    ``margin`` (grade-reward units summed over the rollout horizon)."""

    def __init__(self, task_id: str, model: AdvantageModel, *, margin: float = 0.0, windows: int = 4,
                 level: int = 2):
        self.task_id, self.model, self.margin, self.windows = task_id, model, float(margin), windows
        self.level = level
        self.rule = get_policy("phase_rule", task_id)
        self.cands = candidate_actions(task_id)
        self._index = {a: i for i, a in enumerate(self.cands)}
        self._stacker: HistoryStacker | None = None

    def reset(self, seed: int | None = None) -> None:
        self.rule.reset(seed)
        self._stacker = None

    def act(self, obs: Any, info: dict | None = None) -> ServeAction:
        o = np.asarray(obs, dtype=np.float32).reshape(-1)
        if self._stacker is None or o[14] <= 0.0:  # a new episode (step feature 0)
            self._stacker = HistoryStacker(o.shape[0], self.windows, 0.3, self.task_id, self.level)
            self._stacker.reset()
        x = self._stacker.push(o)
        a_rule = self.rule.act(obs, info)
        i_rule = self._index.get(a_rule)
        if i_rule is None:
            return a_rule
        pred = self.model.predict(x)[0]
        best = int(np.argmax(pred))
        return self.cands[best] if pred[best] - pred[i_rule] > self.margin else a_rule


def relabel(paths: list[Path], policy: AdvantagePolicy, out_dir: str | Path) -> list[Path]:
    """Replay each labelled episode's observations through ``policy`` and write its actions as
    demonstrations (``obs``, ``actions``, ``base_actions`` = the rule's, ``score``) for
    ``bc.demonstrations``. The observations are those of the recorded episode (the rule played it),
    so where the policy deviates the later observations are the rule's trajectory: DAgger's first round."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for p in paths:
        d = np.load(p)
        policy.reset()
        rule = get_policy("phase_rule", policy.task_id)
        acts, base = [], []
        for o in d["obs"]:
            acts.append(action_to_flat(ServeAction.from_any(policy.act(o, {}))))
            base.append(action_to_flat(ServeAction.from_any(rule.act(o, {}))))
        dst = out / f"{policy.task_id}_{p.stem.rsplit('_', 1)[-1]}.npz"
        tmp = dst.with_name(dst.stem + ".partial.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, obs=d["obs"], actions=np.stack(acts), base_actions=np.stack(base), score=d["score"])
        tmp.replace(dst)
        written.append(dst)
    return written


COMPACT_COLS = (0, 1, 2, 3, 11, 14)
"""The current window's features the regressor reads besides the phase features: queue, running,
KV occupancy, mean prompt, arrival rate, step (``envs.serve_env.OBS_FEATURES``)."""


def compact_cols(x_dim: int, level: int = 2) -> np.ndarray:
    """Column indices of :data:`COMPACT_COLS` and the phase features in a stacked input of ``x_dim``."""
    from inferencegym.envs.phase_detector import phase_feature_dim

    k = phase_feature_dim(level)
    return np.r_[list(COMPACT_COLS), np.arange(x_dim - k, x_dim)]


def fit_from_dir(task_id: str, label_dir: str | Path, *, seed: int = 0, hidden: int = 32,
                 weight_decay: float = 1e-2, clip: float = 1.0) -> tuple[AdvantageModel, dict]:
    """Fit :class:`AdvantageModel` on every ``<task>_*.npz`` rollout-label file in ``label_dir``;
    returns it and a summary (files, rows, 3-fold cross-validated advantage of its argmax per labelled
    window beside the hindsight best's, folds by episode)."""
    paths = sorted(Path(label_dir).glob(f"{task_id}_*.npz"))
    d = load_labels(paths, task_id)
    x, adv, ep = d["x"], d["adv"], d["ep"]
    cols = compact_cols(x.shape[1])
    cv = []
    for k in range(3):
        te = (ep % 3) == k
        if te.all() or not te.any():
            continue
        m = AdvantageModel(x.shape[1], adv.shape[1], cols=cols, clip=clip, hidden=hidden, seed=seed)
        m.fit(x[~te], adv[~te], weight_decay=weight_decay)
        pick = m.predict(x[te]).argmax(axis=1)
        cv.append((float(adv[te][np.arange(int(te.sum())), pick].mean()), float(adv[te].max(axis=1).mean())))
    m = AdvantageModel(x.shape[1], adv.shape[1], cols=cols, clip=clip, hidden=hidden, seed=seed)
    m.fit(x, adv, weight_decay=weight_decay)
    return m, {"files": [p.name for p in paths], "rows": int(len(x)), "cv_argmax_adv_and_hindsight_best": cv}


def main() -> None:
    """``python -m inferencegym.rl.advantage_fit --task T --labels DIR --model OUT.pt`` fits the
    regressor (and prints its cross-validation); ``--dagger-seeds FIRST N --margin M`` then labels the
    resulting policy's own episodes into DIR (tag ``dagger``); ``--relabel-out DIR2`` writes its
    choices on every label file's episode as demonstrations for ``bc.demonstrations``."""
    import argparse
    import json
    import time

    from inferencegym.rl.rollout_labels import collect

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--task", required=True)
    ap.add_argument("--labels", default="ray_results/rollout_labels")
    ap.add_argument("--model", default="ray_results/advantage_model.pt")
    ap.add_argument("--margin", type=float, default=0.2)
    ap.add_argument("--dagger-seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=None)
    ap.add_argument("--dagger-tag", default="dagger")
    ap.add_argument("--relabel-out", default=None)
    a = ap.parse_args()
    t = time.perf_counter()
    model, summary = fit_from_dir(a.task, a.labels)
    model.save(a.model)
    print(json.dumps({**summary, "files": len(summary["files"]), "fit_s": round(time.perf_counter() - t, 1)}),
          flush=True)
    if a.dagger_seeds:
        def actor():
            return AdvantagePolicy(a.task, model, margin=a.margin).act

        def done(seed: int, d: dict) -> None:
            print(f"{a.task} {a.dagger_tag} seed {seed}: grade {float(d['score']):.4f}", flush=True)

        collect(a.task, list(range(a.dagger_seeds[0], a.dagger_seeds[0] + a.dagger_seeds[1])), a.labels,
                tag=a.dagger_tag, actor_factory=actor, on_done=done)
    if a.relabel_out:
        paths = sorted(Path(a.labels).glob(f"{a.task}_*.npz"))
        relabel(paths, AdvantagePolicy(a.task, model, margin=a.margin), a.relabel_out)
        print(f"relabelled {len(paths)} episodes into {a.relabel_out}", flush=True)


if __name__ == "__main__":
    main()
