"""Label the mega-prompt guard decision over whole guard spells (issue 21, ninth session).

The shipped ``pretrained:adversarial_multitenant`` beats ``phase_rule`` by dropping the rule's mega-prompt
guard (KV budget 0.15 for 4 windows after a mega-prompt, the rule's ``low+mega`` phase) early in some
windows; one-window flips do not compose (``issue21_adv_flips.py``: dropping in consecutive windows leaves
the next mega-prompt unguarded). Here the decision is labelled as a *spell* decision: at every ``low+mega``
window of an episode played by ``--actor`` (the shipped module, or a guarded module of
:mod:`issue21_adv_spell_policy`), two candidates are played on exact env copies (common random numbers):

- ``drop``: KV 0.9 now and in every later ``low+mega`` window of the same spell (until the next mega-prompt),
- ``hold``: KV 0.15 now and in every later ``low+mega`` window of the same spell (the rule's guard),

the module's other knobs kept and the module acting everywhere else, for ``--horizon`` windows. The label is
``q_drop - q_hold`` (sum of the per-window ``grade`` rewards). Observable features are stored beside it:
the rule detector's level-2 phase features and the raw observation. Training seeds only (< 500); one
``.npz`` per seed, written atomically (a stopped run resumes).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/issue21_adv_spells.py --seeds 100 120 --out ray_results/adv_spells
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from inferencegym.envs.actions import ServeAction  # noqa: E402
from inferencegym.envs.serve_env import LLMServeEnv  # noqa: E402
from inferencegym.policies.phase_rule import PhaseRulePolicy  # noqa: E402
from inferencegym.rl.rollout_labels import GRADE_REWARD  # noqa: E402

TASK = "adversarial_multitenant"


def since_mega(rule: PhaseRulePolicy) -> float:
    """Windows since the last mega-prompt, as the detector counts them (clipped at 10)."""
    return round(float(rule.detector.features(level=2)[6]) * 10)


def spell_rollout(env: LLMServeEnv, mod, rule: PhaseRulePolicy, first: ServeAction, kv: float, s0: float,
                  horizon: int) -> float:
    """Play ``first`` (KV set to ``kv``), then the module, with KV ``kv`` forced in every later ``low+mega``
    window of the same spell (windows since the mega-prompt = ``s0 + j``); sum of rewards."""
    total, a, j = 0.0, first.model_copy(update={"kv_budget_fraction": kv}), 0
    for _ in range(horizon):
        obs, r, term, trunc, info = env.step(a)
        total += float(r)
        if term or trunc:
            break
        j += 1
        a = ServeAction.from_any(mod.act(obs, info))
        rule.act(obs, info)
        if rule.detector.forecast() == "low+mega" and since_mega(rule) == s0 + j:
            a = a.model_copy(update={"kv_budget_fraction": kv})
    return total


def label_episode(actor, seed: int, horizon: int) -> dict[str, np.ndarray]:
    env = LLMServeEnv(TASK, reward_config=GRADE_REWARD)
    rule = PhaseRulePolicy(TASK)
    actor.reset(seed)
    rule.reset(seed)
    obs, info = env.reset(seed=seed)
    rows: dict[str, list] = {k: [] for k in ("w", "feat", "obs", "kv_played", "dropped_before", "q_drop", "q_hold")}
    w, dropped_in, spell_start = 0, False, None
    traj = [np.asarray(obs, np.float32).reshape(-1)]  # every window's observation (history features, hindsight)
    while True:
        before, rule_before = copy.deepcopy(actor), copy.deepcopy(rule)
        a = ServeAction.from_any(actor.act(obs, info))
        rule.act(obs, info)
        if rule.detector.forecast() == "low+mega":
            s0 = since_mega(rule)
            start = w - s0
            if start != spell_start:
                spell_start, dropped_in = start, False
            q = []
            for kv in (0.9, 0.15):
                m, rr = copy.deepcopy(before), copy.deepcopy(rule_before)
                m.act(obs, info)
                rr.act(obs, info)
                base = getattr(m, "base", m)  # a guarded actor continues as its plain module
                q.append(spell_rollout(copy.deepcopy(env), base, rr, a, kv, s0, horizon))
            rows["w"].append(w)
            rows["feat"].append(rule.detector.features(level=2))
            rows["obs"].append(np.asarray(obs, np.float32).reshape(-1))
            rows["kv_played"].append(float(a.kv_budget_fraction))
            rows["dropped_before"].append(float(dropped_in))
            rows["q_drop"].append(q[0])
            rows["q_hold"].append(q[1])
            dropped_in = dropped_in or a.kv_budget_fraction > 0.5
        obs, _, term, trunc, info = env.step(a)
        traj.append(np.asarray(obs, np.float32).reshape(-1))
        w += 1
        if term or trunc:
            break
    out = {k: np.asarray(v, np.float64 if k.startswith("q") else np.float32) for k, v in rows.items()}
    out["score"] = np.float64(env.grade().score)
    out["traj_obs"] = np.stack(traj)  # traj_obs[w] is the observation the decision at window w read
    return out


def label_seeds(out: Path, tag: str, seeds: range, label, describe) -> None:
    """Per seed, ``label(seed)`` (a dict of arrays) saved as ``out/TASK_TAG_SEED.npz`` (written whole: a
    stopped run never leaves half a file; seeds already labelled are skipped), then ``describe(seed, d, s)``
    (a progress line; ``s`` the seconds it took)."""
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        path = out / f"{TASK}_{tag}_{seed}.npz"
        if path.is_file():
            continue
        t0 = time.perf_counter()
        d = label(seed)
        tmp = path.with_name(path.stem + ".partial.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, **d)
        tmp.replace(path)
        print(describe(seed, d, time.perf_counter() - t0), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs=2, metavar=("FIRST", "N"), default=(100, 120))
    ap.add_argument("--horizon", type=int, default=20)
    ap.add_argument("--actor", default="pretrained:adversarial_multitenant",
                    help="a policy spec, or spell:MODEL.pt@MARGIN (issue21_adv_spell_policy.py)")
    ap.add_argument("--tag", default="module")
    ap.add_argument("--out", type=Path, default=Path("ray_results/adv_spells"))
    args = ap.parse_args()
    if args.seeds[0] + args.seeds[1] > 500:
        sys.exit("spell labels use training seeds (< 500); got seeds up to "
                 f"{args.seeds[0] + args.seeds[1] - 1}. Pass --seeds FIRST N with FIRST + N <= 500.")
    from issue21_adv_actors import make_actor

    def describe(seed: int, d: dict, secs: float) -> str:
        adv = d["q_drop"] - d["q_hold"]
        return (f"seed {seed}: grade {float(d['score']):.4f}, {len(adv)} low+mega windows, drop pays in "
                f"{int((adv > 0).sum())}, mean adv {adv.mean() if len(adv) else 0:+.3f}, {secs:.1f} s")

    label_seeds(args.out, args.tag, range(args.seeds[0], args.seeds[0] + args.seeds[1]),
                lambda seed: label_episode(make_actor(args.actor), seed, args.horizon), describe)


if __name__ == "__main__":
    main()
