"""Training throughput per task against RLlib's own floor, in one run, with a profile.

For each task's shipped config (BC and MLflow off, everything else as shipped: batch, epochs,
env runners, vectorised envs), PPO trains ``--iterations`` iterations on

- the real env (``inferencegym_single`` / ``inferencegym_cluster``), and
- the *floor*: a trivial env with the same observation and action spaces whose ``step`` costs
  nothing (:mod:`benchmarks.trivial_envs`), i.e. what RLlib itself allows on this machine with the
  same config,

interleaved (real, floor, real, floor, ... per task) so both see the same machine load. It reports
env steps per second while training (the first iteration is excluded: it includes start-up), the
ratio to the floor, and where the time goes:

- ``env_s``: the env's own cost, measured outside RLlib (the same number of steps of the
  unwrapped env with random actions, in this process) -> ``env_share`` of training wall time
  (target on single-agent tasks: <= 30%);
- RLlib's timers from the result dict: ``sample`` (EnvRunner sampling), ``learner_update``, weight
  sync, and inside sampling the per-call means of env step, module forward (``rlmodule_inference``)
  and the env-to-module / module-to-env connector pipelines, multiplied by the number of calls.

Run (about 1-2 min per task on an idle 2-core machine with the default 3 iterations)::

    OMP_NUM_THREADS=1 python benchmarks/train_throughput.py --tasks static_workload bursty_workload \\
        adversarial_multitenant cluster_routing --iterations 3 --out benchmarks/results/train_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import ray.cloudpickle  # noqa: E402
import torch  # noqa: E402
import trivial_envs  # noqa: E402

from inferencegym.rl.config import load_config  # noqa: E402
from inferencegym.rl.env_creators import make_cluster_env, make_single_env  # noqa: E402
from inferencegym.rl.train import STEPS_KEY, build_ppo_config, ensure_ray  # noqa: E402

ray.cloudpickle.register_pickle_by_value(trivial_envs)  # remote EnvRunners cannot import benchmarks/
REPO = Path(__file__).resolve().parents[1]


def _config(task: str, sets: list[str]):
    return load_config(REPO / "rllib_configs" / f"{task}.yaml").with_overrides(
        sets=["bc.enabled=false", "mlflow.enabled=false", *sets])


def _flat(d: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flat(v, key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


def _timer(flat: dict[str, float], *names: str) -> float | None:
    """The first key that ends with one of ``names`` (RLlib nests timers differently per version)."""
    for n in names:
        for k, v in flat.items():
            if k.endswith(n):
                return v
    return None


def train_run(cfg, env, iterations: int) -> dict:
    """``iterations`` PPO iterations; steps/s and RLlib's timers over iterations 2.. (1 is start-up)."""
    pc = build_ppo_config(cfg, env=env[0] if env else None)
    if env:  # the floor env takes its recording instead of the task's env_config
        pc = pc.environment(env[0], env_config=env[1], disable_env_checking=True)
    algo = pc.build_algo()
    try:
        walls, steps, flats = [], [], []
        last = 0
        for _ in range(iterations):
            t = time.perf_counter()
            res = algo.train()
            walls.append(time.perf_counter() - t)
            total = int(res.get(STEPS_KEY) or 0)
            steps.append(total - last)
            last = total
            flats.append(_flat(res))
    finally:
        algo.stop()
    w, s = walls[1:] or walls, steps[1:] or steps
    if min(s) <= 0:
        raise RuntimeError(f"an iteration sampled no env steps ({steps}): the env runner failed")
    f = flats[-1]
    n_envs = cfg.resources.num_envs_per_env_runner
    per_iter = statistics.median(s)
    calls = per_iter / n_envs  # vectorised env steps per iteration
    prof = {"training_step_s": _timer(f, "timers/training_step"),
            "sample_s": _timer(f, "timers/env_runner_sampling_timer", "timers/sample"),
            "learner_update_s": _timer(f, "timers/learner_update_timer"),
            "synch_weights_s": _timer(f, "timers/synch_weights"),
            "env_step_call_ms": _timer(f, "env_runners/env_step_timer"),
            "module_forward_call_ms": _timer(f, "env_runners/rlmodule_inference_timer"),
            "env_to_module_call_ms": _timer(f, "env_runners/env_to_module_connector/connector_pipeline_timer"),
            "module_to_env_call_ms": _timer(f, "env_runners/module_to_env_connector/connector_pipeline_timer")}
    for k in ("env_step_call_ms", "module_forward_call_ms", "env_to_module_call_ms", "module_to_env_call_ms"):
        if prof[k] is not None:
            prof[k.replace("_call_ms", "_s_per_iter")] = prof[k] * calls
            prof[k] *= 1e3
    return {"iteration_wall_s": [round(x, 3) for x in walls], "env_steps_per_iter": per_iter,
            "steps_per_s": sum(s) / sum(w), "profile": prof,
            "timer_keys": sorted(k for k in f if "timer" in k or k.startswith("timers"))}


def env_cost(cfg, steps: int, seed: int = 0) -> float:
    """Seconds the project's env takes for ``steps`` steps (random actions, in this process)."""
    env_config = {"task_id": cfg.task_id, **cfg.env_config}
    rng = np.random.default_rng(seed)
    if cfg.env == "single":
        env = make_single_env(env_config)
        env.reset(seed=seed)
        env.action_space.seed(seed)
        t = time.perf_counter()
        for _ in range(steps):
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
        return time.perf_counter() - t
    env = make_cluster_env(env_config)
    obs, _ = env.reset(seed=seed)
    t = time.perf_counter()
    for _ in range(steps):
        act = {}
        for aid, o in obs.items():
            if aid == "router":
                mask = np.asarray(o["action_mask"]) > 0.5
                act[aid] = int(rng.choice(np.flatnonzero(mask)))
            else:
                act[aid] = env.action_spaces[aid].sample()
        obs, _, term, trunc, _ = env.step(act)
        if term.get("__all__") or trunc.get("__all__"):
            obs, _ = env.reset()
    return time.perf_counter() - t


def _write(out: Path | None, rows: list, load0: tuple) -> None:
    """The record so far (written after every task: a later failure keeps the earlier rows)."""
    if out is None:
        return
    record = {"command": " ".join(sys.argv), "loadavg_before": load0, "loadavg_after": os.getloadavg(),
              "cpus": os.cpu_count(), "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["static_workload", "bursty_workload", "adversarial_multitenant"])
    ap.add_argument("--iterations", type=int, default=3, help="PPO iterations per run (the first is excluded)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved real/floor rounds per task")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override a.b=v")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ensure_ray()
    load0 = os.getloadavg()
    rows = []
    for task in args.tasks:
        cfg = _config(task, args.sets)
        floor_env = trivial_envs.trivial_env_for(cfg)
        real, floor = [], []
        try:
            for _ in range(args.rounds):
                real.append(train_run(cfg, None, args.iterations))
                floor.append(train_run(cfg, floor_env, args.iterations))
        except Exception as exc:  # noqa: BLE001 - a failed task is recorded, the others still run
            rows.append({"task": task, "error": f"{type(exc).__name__}: {exc}"[:500]})
            print(f"{task}: failed: {rows[-1]['error']}", flush=True)
            continue
        r_sps = statistics.median(x["steps_per_s"] for x in real)
        f_sps = statistics.median(x["steps_per_s"] for x in floor)
        n = int(real[-1]["env_steps_per_iter"])
        env_s = env_cost(cfg, n)
        wall_per_iter = n / r_sps
        row = {"task": task, "env": cfg.env, "num_env_runners": cfg.resources.num_env_runners,
               "num_envs_per_env_runner": cfg.resources.num_envs_per_env_runner,
               "train_batch": cfg.ppo.train_batch_size_per_learner, "num_epochs": cfg.ppo.num_epochs,
               "steps_per_s": round(r_sps, 1), "floor_steps_per_s": round(f_sps, 1),
               "ratio_to_floor": round(r_sps / f_sps, 3), "env_s_per_iter": round(env_s, 3),
               "wall_s_per_iter": round(wall_per_iter, 3), "env_share": round(env_s / wall_per_iter, 3),
               "profile": real[-1]["profile"], "floor_profile": floor[-1]["profile"],
               "runs": {"real": real, "floor": floor}}
        rows.append(row)
        _write(args.out, rows, load0)
        print(f"{task:28s} {r_sps:8.1f} steps/s  floor {f_sps:8.1f}  ratio {r_sps / f_sps:5.2f}  "
              f"steps/iter {n}  iteration wall s {real[-1]['iteration_wall_s']}  "
              f"env share {env_s / wall_per_iter:5.1%}  profile {json.dumps(row['profile'])}", flush=True)
    _write(args.out, rows, load0)
    print(f"load average before {load0}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
