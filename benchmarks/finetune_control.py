"""PPO fine-tuning of the learned autoscaler (issue 22 item 6), warm-started from a DAgger export
(``benchmarks/train_control.py --export-dir DIR`` or ``inferencegym/data/pretrained/cluster_autoscaling``),
on the training days only.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python benchmarks/finetune_control.py \\
        --warm-start inferencegym/data/pretrained/cluster_autoscaling --minutes 14 --export-dir OUT \\
        --out benchmarks/results/control/finetune2.json

What changed from the first attempt (``--reward terminal --sharpen 1 --no-asymmetric`` reproduce
its set-up; why each, ``inferencegym/rl/control_finetune.py``):

1. ``ControlEnv(reward="shaped", critic_obs=True)``: failures charged per step (potential-based;
   the undiscounted return is ``grade - 1``), the critic reads the realized arrival rate ahead.
2. The module: the warm start's actor (logits x ``--sharpen``; greedy actions unchanged) and a
   critic with its own trunk, fitted first on ``--critic-episodes`` sampled training days.
3. RLlib PPO with ``ConservativePPOTorchLearner``: ``--kl-warm`` x KL(warm start || policy) on every
   batch (the frozen sharpened warm start), the actor frozen for ``--actor-warmup-days`` while the
   critic adapts, ``--days-per-iter`` training days per PPO batch, gamma 0.99, lambda 0.95.
4. Greedy validation (days 10 / 11, seeds 5000..) of the warm start and of the tuned actor every
   ``--val-every`` iterations and at the end, same episodes; the best tuned actor is exported only
   if it scores higher than the warm start.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from inferencegym.envs.control_env import ControlEnv
from inferencegym.rl.bc import bc_train
from inferencegym.rl.control import LearnedAutoscaler, export_control_module, greedy_actor
from inferencegym.rl.control_agents import warm_module_spec
from inferencegym.rl.control_finetune import actor_only, asymmetric_from_warm, discounted, sampled_episode
from inferencegym.rl.policy_loader import load_exported
from validate_control import validation_episodes  # noqa: E402  (benchmarks/, on sys.path when run as a script)

ENV = "inferencegym_control_single"


def validate(actor, features: str, episodes: int) -> list[dict]:
    """Greedy validation-day episodes of ``actor`` (a module on the warm start's observation)."""
    ctl = LearnedAutoscaler(type("P", (), {"act": staticmethod(greedy_actor(actor))})(), features)
    return validation_episodes(ctl, features, episodes) if episodes else []


def validate_on(env: ControlEnv, actor, features: str, seed: int) -> dict:
    """One greedy episode of ``actor`` on ``env`` (any split) at ``seed``."""
    ctl = LearnedAutoscaler(type("P", (), {"act": staticmethod(greedy_actor(actor))})(), features)
    env.reset(seed=seed)
    ctl.reset(env.ctx)
    done = False
    while not done:
        _, _, done, _, info = env.step(ctl.act(env.fleet.observe()))
    return {"day": env.day, "seed": seed, "score": info["score"], "gpu_hours": info["summary"]["gpu_hours"],
            "slo_attainment": info["summary"]["slo_attainment"]}


def mean_score(eps: list[dict]) -> float:
    return float(np.mean([e["score"] for e in eps])) if eps else -np.inf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm-start", required=True, help="an exported autoscaler directory")
    ap.add_argument("--minutes", type=float, default=14.0, help="wall-clock budget of the PPO iterations (after the critic)")
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--lambda", dest="lam", type=float, default=0.95)
    ap.add_argument("--clip", type=float, default=0.2)
    ap.add_argument("--reward", default="shaped", choices=["shaped", "terminal"])
    ap.add_argument("--sharpen", type=float, default=3.0, help="scale of the warm start's logits")
    ap.add_argument("--kl-warm", type=float, default=0.05, help="weight of KL(warm start || policy)")
    ap.add_argument("--critic-episodes", type=int, default=3)
    ap.add_argument("--critic-epochs", type=int, default=60)
    ap.add_argument("--critic-cache", default=None, help="JSON of the critic's sampled episodes (reused if it matches)")
    ap.add_argument("--reward-scale", type=float, default=1000.0,
                    help="rewards x this for PPO and the critic (returns of order 1-10; advantages are standardized)")
    ap.add_argument("--actor-warmup-days", type=float, default=1.0)
    ap.add_argument("--days-per-iter", type=int, default=2)
    ap.add_argument("--val-episodes", type=int, default=4)
    ap.add_argument("--val-every", type=int, default=0, help="validate every N iterations (0: only at the end)")
    ap.add_argument("--warm-validation", default=None, help="JSON of the warm start's validation episodes (reuse)")
    ap.add_argument("--episode-windows", type=int, default=None, help="shorter training episodes (smoke runs)")
    ap.add_argument("--diagnose", action="store_true", help="also play the warm start greedily on the first critic episode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--export-dir", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.tune.registry import register_env

    from inferencegym.rl.control_finetune import control_learner_class

    torch.set_num_threads(1)
    warm = load_exported(a.warm_start, "cluster_autoscaling").module
    feats = load_exported(a.warm_start, "cluster_autoscaling").meta["control"]["features"]
    t0, c0 = time.time(), time.process_time()
    result: dict = {"args": vars(a), "features": feats}

    def save() -> None:
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps(result, indent=1, default=float))

    if a.warm_validation and Path(a.warm_validation).is_file():
        val_warm = json.loads(Path(a.warm_validation).read_text())
    else:
        val_warm = validate(warm, feats, a.val_episodes)
        if a.warm_validation:
            Path(a.warm_validation).write_text(json.dumps(val_warm))
    s_warm = mean_score(val_warm)
    result["validation_warm"] = val_warm
    print(f"warm start validation {s_warm:.4f}, cpu {time.process_time() - c0:.0f} s", flush=True)

    env = ControlEnv(split="train", features=feats, reward=a.reward, critic_obs=True,
                     episode_windows_override=a.episode_windows)
    module = asymmetric_from_warm(warm, env.observation_space, sharpen=a.sharpen, seed=a.seed)
    key = f"{a.warm_start}|{a.reward}|{a.sharpen}|{a.episode_windows}"
    cache = Path(a.critic_cache) if a.critic_cache else None
    episodes: list = []
    if cache and cache.is_file() and json.loads(cache.read_text())["key"] == key:
        episodes = json.loads(cache.read_text())["episodes"]
    for k in range(len(episodes), a.critic_episodes):  # training seeds past DAgger's (0..29)
        x, rw, ep = sampled_episode(env, module, 100 + k)
        episodes.append({"obs": np.stack(x).tolist(), "rewards": rw, "summary": ep})
        print(f"critic episode {k}: day {ep['day']}, sampled score {ep['score']:.4f}, greedy share "
              f"{ep['greedy_share']:.3f}, cpu {time.process_time() - c0:.0f} s", flush=True)
        if cache:
            cache.write_text(json.dumps({"key": key, "episodes": episodes}))
    episodes = episodes[:a.critic_episodes]
    xs = [np.asarray(o, np.float32) for e in episodes for o in e["obs"]]
    gs = np.concatenate([discounted(np.asarray(e["rewards"]) * a.reward_scale, a.gamma) for e in episodes])
    crit_eps = [e["summary"] for e in episodes]
    if a.diagnose and episodes:  # the same (day, seed) as the first critic episode, greedy
        plain = ControlEnv(split="train", features=feats, episode_windows_override=a.episode_windows)
        plain.reset(seed=100)
        g = validate_on(plain, warm, feats, 100)
        result["greedy_on_critic_seed"] = g
        print(f"greedy warm start on the same episode: score {g['score']:.4f} (sampled "
              f"{crit_eps[0]['score']:.4f})", flush=True)
    v_loss = bc_train(module, xs, [0] * len(xs), epochs=a.critic_epochs, lr=1e-3, minibatch_size=256, seed=a.seed,
                      returns=gs, imitate=False)
    result.update(critic_episodes=crit_eps, critic_loss=v_loss)
    print(f"critic fitted on {len(xs)} steps (loss / return variance {v_loss[0]:.3f} -> {v_loss[-1]:.3f})", flush=True)
    save()

    teacher_dir = Path(tempfile.mkdtemp(prefix="ctl_teacher_"))
    module.save_to_path(str(teacher_dir))
    def make_env(cfg: dict):
        import gymnasium as gym

        e = ControlEnv(split="train", features=cfg["features"], reward=cfg["reward"], critic_obs=True,
                       episode_windows_override=cfg["windows"])
        scale = cfg["scale"]
        return gym.wrappers.TransformReward(e, lambda r: r * scale)

    register_env(ENV, make_env)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    spec = warm_module_spec(module, env.observation_space, env.action_space, source=a.warm_start)
    steps = 1440 if a.episode_windows is None else a.episode_windows * 10
    cfg = (PPOConfig().environment(ENV, env_config={"features": feats, "reward": a.reward,
                                                       "windows": a.episode_windows, "scale": a.reward_scale},
                                   disable_env_checking=True)
           .env_runners(num_env_runners=0, rollout_fragment_length=steps)
           .learners(num_learners=0, learner_class=control_learner_class(),
                     learner_config_dict={"teacher_kl_coeff": a.kl_warm,
                                          "teacher_state_paths": {"default_policy": str(teacher_dir)},
                                          "actor_warmup_steps": int(a.actor_warmup_days * steps)})
           .rl_module(rl_module_spec=spec)
           .training(lr=a.lr, gamma=a.gamma, lambda_=a.lam, clip_param=a.clip, use_kl_loss=False,
                     entropy_coeff=0.0, vf_clip_param=1e6, train_batch_size_per_learner=steps * a.days_per_iter,
                     minibatch_size=min(288, steps * a.days_per_iter), num_epochs=4)
           .debugging(seed=a.seed, log_level="ERROR"))
    algo = cfg.build_algo()
    log: list[dict] = []
    best = (s_warm, None, None)
    t_ppo = time.time()
    while time.time() - t_ppo < a.minutes * 60:
        r = algo.train()
        lm = r.get("learners", {}).get("default_policy", {})
        row = {"iteration": len(log) + 1, "episode_return_mean": r["env_runners"].get("episode_return_mean"),
               "vf_explained_var": lm.get("vf_explained_var"), "teacher_kl": lm.get("teacher_kl"),
               "entropy": lm.get("entropy"), "wall_s": time.time() - t0, "cpu_s": time.process_time() - c0}
        if a.val_every and row["iteration"] % a.val_every == 0:
            act = actor_only(algo.get_module(), warm)
            val = validate(act, feats, a.val_episodes)
            row["validation"] = mean_score(val)
            if row["validation"] > best[0]:
                best = (row["validation"], act, val)
        log.append(row)
        result["iterations"] = log
        save()
        print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    act = actor_only(algo.get_module(), warm)
    algo.stop()
    ray.shutdown()
    shutil.rmtree(teacher_dir, ignore_errors=True)
    val = validate(act, feats, a.val_episodes)
    s_t = mean_score(val)
    print(f"validation: warm start {s_warm:.4f}, final tuned {s_t:.4f}", flush=True)
    if s_t > best[0]:
        best = (s_t, act, val)
    result.update(validation_final=val, best_validation=best[0], better=best[1] is not None,
                  train_cpu_s=time.process_time() - c0, train_wall_s=time.time() - t0)
    if best[1] is not None and a.export_dir:
        out = Path(a.export_dir)
        if out.exists():
            shutil.rmtree(out)
        export_control_module(best[1], out, task_id="cluster_autoscaling", role="autoscaler", features=feats,
                              hidden=list(warm.model_config["hidden"]),
                              extra={"train": {"method": "PPO fine-tuning from " + a.warm_start,
                                               "validation": best[0], "validation_warm": s_warm,
                                               "args": {k: v for k, v in vars(a).items() if k != "out"}}})
        result["validation_best"] = best[2]
        print(f"exported {out} (validation {best[0]:.4f} vs warm {s_warm:.4f})", flush=True)
    else:
        print("not better than the warm start: nothing exported", flush=True)
    save()


if __name__ == "__main__":
    main()
