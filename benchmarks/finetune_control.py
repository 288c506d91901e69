"""Conservative PPO fine-tuning of the learned autoscaler (issue 22 item 6), warm-started from a
DAgger export (``benchmarks/train_control.py --export-dir DIR``), on the training days only.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/finetune_control.py \\
        --warm-start DIR --minutes 30 --val-episodes 4 --export-dir OUT --out benchmarks/results/control/finetune.json

1. The warm module's value head is fitted to the discounted returns of ``--critic-episodes`` of its
   own (sampled) rollouts (``bc_train(imitate=False)``), so PPO's first advantages are not noise.
2. RLlib PPO on ``ControlEnv(split="train", features=<the warm start's>)``: one day per iteration
   (1,440 control steps), small learning rate (``--lr`` 1e-5), clip 0.1 and PPO's KL penalty,
   which with so small a step keeps the policy near the warm start.
3. The greedy policy is scored on the validation days (seeds 5000.., days 10 / 11) against the
   warm start on the same episodes; the fine-tuned module is exported only if it scores higher.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from inferencegym.envs.control_env import ControlEnv
from inferencegym.rl.bc import bc_train
from inferencegym.rl.control import LearnedAutoscaler, export_control_module, greedy_actor
from inferencegym.rl.control_agents import warm_module_spec
from inferencegym.rl.policy_loader import load_exported
from validate_control import validation_episodes  # noqa: E402  (benchmarks/, on sys.path when run as a script)

ENV = "inferencegym_control_single"


def rollout_returns(env: ControlEnv, module, seed: int, gamma: float) -> tuple[list, list]:
    """Observations and discounted returns of one episode of ``module``'s sampled actions."""
    import torch
    from ray.rllib.core.columns import Columns

    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    xs, rs, done = [], [], False
    while not done:
        with torch.no_grad():
            logits = module.forward_inference({Columns.OBS: torch.as_tensor(obs[None])})[Columns.ACTION_DIST_INPUTS][0]
        p = torch.softmax(logits, -1).numpy().astype(float)
        xs.append(obs)
        obs, r, done, _, _ = env.step(int(rng.choice(len(p), p=p / p.sum())))
        rs.append(r)
    g, out = 0.0, []
    for r in reversed(rs):
        g = r + gamma * g
        out.append(g)
    return xs, out[::-1]


def validate(module, features: str, episodes: int) -> list[dict]:
    """Greedy validation-day episodes of ``module`` (``validate_control.validation_episodes``)."""
    ctl = LearnedAutoscaler(type("P", (), {"act": staticmethod(greedy_actor(module))})(), features)
    return validation_episodes(ctl, features, episodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm-start", required=True, help="an exported autoscaler (train_control.py --export-dir)")
    ap.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget of the PPO iterations")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--gamma", type=float, default=0.999)
    ap.add_argument("--critic-episodes", type=int, default=2)
    ap.add_argument("--val-episodes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--export-dir", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.tune.registry import register_env

    torch.set_num_threads(1)
    warm = load_exported(a.warm_start, "cluster_autoscaling")
    feats = warm.meta["control"]["features"]
    hidden = list(warm.module.model_config["hidden"])
    t0, c0 = time.time(), time.process_time()
    env = ControlEnv(split="train", features=feats)
    module = warm.module
    xs, gs = [], []
    for k in range(a.critic_episodes):  # training seeds past DAgger's (0..29)
        x, g = rollout_returns(env, module, 100 + k, a.gamma)
        xs += x
        gs += g
    acts = [0] * len(xs)
    v_loss = bc_train(module, xs, acts, epochs=10, lr=1e-3, minibatch_size=256, seed=a.seed, returns=gs,
                      imitate=False)
    print(f"critic fitted on {len(xs)} steps (loss {v_loss[-1]:.3f}), cpu {time.process_time() - c0:.0f} s", flush=True)
    register_env(ENV, lambda cfg: ControlEnv(split="train", features=cfg["features"]))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    spec = warm_module_spec(module, env.observation_space, env.action_space, source=a.warm_start)
    cfg = (PPOConfig().environment(ENV, env_config={"features": feats})
           .env_runners(num_env_runners=0, rollout_fragment_length=1440)
           .learners(num_learners=0).rl_module(rl_module_spec=spec)
           .training(lr=a.lr, gamma=a.gamma, lambda_=0.95, clip_param=0.1, kl_coeff=0.2, kl_target=0.005,
                     entropy_coeff=0.0, train_batch_size_per_learner=1440, minibatch_size=288, num_epochs=4)
           .debugging(seed=a.seed))
    algo = cfg.build_algo()
    log = []
    while time.time() - t0 < a.minutes * 60:
        r = algo.train()
        ret = r["env_runners"].get("episode_return_mean", float("nan"))
        log.append({"iteration": len(log) + 1, "episode_return_mean": ret, "wall_s": time.time() - t0})
        print(f"iter {len(log)}: return {ret:.4f}, wall {time.time() - t0:.0f} s", flush=True)
    tuned = algo.get_module()
    algo.stop()
    ray.shutdown()
    val_warm = validate(load_exported(a.warm_start, "cluster_autoscaling").module, feats, a.val_episodes)
    val_tuned = validate(tuned, feats, a.val_episodes)
    s_w, s_t = (float(np.mean([e["score"] for e in v])) for v in (val_warm, val_tuned))
    better = s_t > s_w
    print(f"validation: warm start {s_w:.4f}, fine-tuned {s_t:.4f} ({'better' if better else 'not better'})", flush=True)
    result = {"args": vars(a), "features": feats, "iterations": log, "validation_warm": val_warm,
              "validation_tuned": val_tuned, "better": better, "train_cpu_s": time.process_time() - c0,
              "train_wall_s": time.time() - t0}
    if better and a.export_dir:
        out = Path(a.export_dir)
        if out.exists():
            shutil.rmtree(out)
        export_control_module(tuned, out, task_id="cluster_autoscaling", role="autoscaler", features=feats,
                              hidden=hidden, extra={"train": {"method": "PPO fine-tuning from " + a.warm_start,
                                                              "iterations": len(log), "lr": a.lr}})
        print(f"exported {out}", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=1, default=float))


if __name__ == "__main__":
    main()
