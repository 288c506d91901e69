"""Probe a variant of a single-agent task (other rates or engine) before changing its spec.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/task_variant_probe.py --task bursty_workload \\
        --rate 1.9 --burst-rate 7.6 --train-seeds 2 --eval-seeds 3 --rounds 2 [--exploits]

The variant replaces the task in this process's registry (same id, so every baseline reads it), with
cost references re-derived by the stated formula (cluster GPU $/s / nominal offered output tokens/s
x 1000; 4x for cost_bad). Then: random / static_default / heuristic on evaluation seeds 1000..;
optionally the exploit probes against the heuristic on seeds 500-501 (tests/envs/test_env_exploits.py);
best_static and the clairvoyant table searched on training seeds 0.. exactly as
``python -m inferencegym.evaluation.search_best_static --clairvoyant`` does (nothing is written);
both evaluated on the same evaluation seeds. This is how the loads of issue 15's re-derivation
were chosen (docs/bench/fidelity.md); the shipped figures come from benchmarks/difficulty_table.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from inferencegym.envs.serve_env import LLMServeEnv, nominal_rates  # noqa: E402
from inferencegym.evaluation import search_best_static as S  # noqa: E402
from inferencegym.evaluation.single import run_episode  # noqa: E402
from inferencegym.policies import get_policy  # noqa: E402
from inferencegym.policies.baselines import EXPLOITS, StaticPolicy  # noqa: E402
from inferencegym.sim.execution import ExecutionModel  # noqa: E402
from inferencegym.tasks.spec import TaskSpec, get_task, register_task  # noqa: E402


def variant(task_id: str, *, engine_profile: str | None = None, rate_rps: float | None = None,
            burst_rate_rps: float | None = None) -> TaskSpec:
    """Register (replacing) a variant of ``task_id`` with other rates / engine; cost references follow."""
    t = get_task(task_id)
    w = t.workload
    if rate_rps is not None:
        w = dataclasses.replace(w, rate_rps=rate_rps)
    if burst_rate_rps is not None:
        w = dataclasses.replace(w, burst_rate_rps=burst_rate_rps)
    t = dataclasses.replace(t, workload=w, engine_profile=engine_profile or t.engine_profile)
    m = ExecutionModel.from_preset(model=t.model, gpu=t.gpu, tensor_parallel=t.tensor_parallel)
    good = m.gpu_hour_usd * t.replicas / 3600.0 / nominal_rates(t)[1] * 1000.0
    t = dataclasses.replace(t, grader=dataclasses.replace(t.grader, cost_good_usd_per_1k=good,
                                                          cost_bad_usd_per_1k=4 * good))
    return register_task(t, replace=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--engine-profile", default=None)
    ap.add_argument("--rate", type=float, default=None, help="rate_rps (OFF rate of on/off tasks)")
    ap.add_argument("--burst-rate", type=float, default=None, help="burst_rate_rps (ON rate)")
    ap.add_argument("--train-seeds", type=int, default=2)
    ap.add_argument("--eval-seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="clairvoyant coordinate-ascent rounds")
    ap.add_argument("--exploits", action="store_true")
    args = ap.parse_args(argv)
    t = variant(args.task, engine_profile=args.engine_profile, rate_rps=args.rate,
                burst_rate_rps=args.burst_rate)
    print(f"{t.task_id}: engine {t.engine_profile}, rate {t.workload.rate_rps}, burst "
          f"{t.workload.burst_rate_rps}, cost_good {t.grader.cost_good_usd_per_1k:.4g}", flush=True)
    env, penv = LLMServeEnv(t.task_id), LLMServeEnv(t.task_id, privileged=True)
    ev = list(range(1000, 1000 + args.eval_seeds))

    def mean(policy, e=env, seeds=ev) -> float:
        return float(np.mean([run_episode(e, policy, s).score for s in seeds]))

    res = {p: mean(get_policy(p, t.task_id)) for p in ("random", "static_default", "heuristic")}
    if args.exploits:
        h = mean(get_policy("heuristic", t.task_id), seeds=[500, 501])
        ex = {n: round(mean(StaticPolicy(a), seeds=[500, 501]), 3) for n, a in EXPLOITS.items()}
        print(f"seeds 500-501: heuristic {h:.3f}, exploits {ex}", flush=True)
    seeds = list(range(args.train_seeds))
    best, score, _ = S.search_best_static(t.task_id, seeds)
    table, _ = S.search_clairvoyant(t.task_id, seeds, best, rounds=args.rounds)
    best, _ = S.refine_best_static(t.task_id, seeds, best, score, table)
    res["best_static"] = mean(StaticPolicy(best))
    res["clairvoyant"] = mean(S._PhasePolicy(table, best), e=penv)
    print("eval", json.dumps({k: round(v, 3) for k, v in res.items()}),
          f"clairvoyant - best_static {res['clairvoyant'] - res['best_static']:+.3f}")
    print("best_static", json.dumps(best.model_dump()))
    print("clairvoyant", json.dumps({p: a.model_dump() for p, a in table.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
