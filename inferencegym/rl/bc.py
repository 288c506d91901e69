"""Behaviour-cloning warm start: imitate a baseline policy before PPO.

A few epochs of supervised negative log-likelihood of the baseline's actions under the module's own
action distribution (``get_train_action_dist_cls().from_logits(...).logp``), on demonstrations the
baseline generates on training seeds (``bc.seed``, ``bc.seed + 1``, ...; disjoint from the held-out
evaluation seeds). The trained module state is saved with ``RLModule.save_to_path`` and handed to
PPO through ``RLModuleSpec(load_state_path=...)``, so the learner and every EnvRunner start from it.

Single-agent env: the baseline acts on the env's Dict/ServeAction space; its action is encoded with
the env package's ``action_to_flat``. Cluster env: the router module imitates the baseline router
(e.g. ``least_outstanding_requests``); replica agents keep the env's default knobs during collection.

With ``bc.dagger_rounds`` > 0 (single-agent env) the cloning is followed by DAgger rounds: the
student's own rollouts, relabelled by the baseline (:mod:`inferencegym.rl.dagger`), join the data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from inferencegym.envs.actions import ServeAction, action_to_flat
from inferencegym.policies import get_policy, is_privileged
from inferencegym.policies.routers import get_cluster_policy
from inferencegym.rl.dagger import (
    beta_for_round,
    collect_relabelled,
    round_seed,
    student_actor,
)
from inferencegym.rl.env_creators import make_cluster_env, make_single_env
from inferencegym.rl.modules import module_class


def _stack_obs(obs_list: list[Any]) -> Any:
    import torch

    first = obs_list[0]
    if isinstance(first, dict):
        return {k: torch.as_tensor(np.stack([np.asarray(o[k], dtype=np.float32) for o in obs_list]))
                for k in first}
    return torch.as_tensor(np.stack([np.asarray(o, dtype=np.float32) for o in obs_list]))


def _index(obs: Any, idx: Any) -> Any:
    if isinstance(obs, dict):
        return {k: v[idx] for k, v in obs.items()}
    return obs[idx]


def discounted_returns(rewards: list[float], episode_ends: list[bool], gamma: float) -> np.ndarray:
    """Reward-to-go ``G_t = r_t + gamma * G_{t+1}`` of each step, restarting after every step with
    ``episode_ends[t]`` True (the episode's last step: nothing is bootstrapped past it)."""
    if len(rewards) != len(episode_ends):
        raise ValueError(f"need one episode_ends flag per reward; got {len(rewards)} rewards and "
                         f"{len(episode_ends)} flags")
    out = np.zeros(len(rewards))
    g = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        if episode_ends[t]:
            g = 0.0
        g = float(rewards[t]) + gamma * g
        out[t] = g
    return out


def bc_train(module: Any, observations: list[Any], actions: list[Any], *, epochs: int, lr: float,
             minibatch_size: int, seed: int = 0, returns: Any = None, imitate: bool = True) -> list[float]:
    """Supervised NLL of ``actions`` under ``module``; returns the mean loss of each epoch.

    Minibatch order comes from ``numpy.random.default_rng(seed)``. With ``returns`` (the
    demonstrations' discounted reward-to-go, one per observation) the module's value function is
    fitted too, in a separate optimiser step per minibatch (``compute_values`` on the encoder's
    detached embeddings, so only the value head learns from it; squared error over the returns'
    variance; the reported loss is the sum; a NaN return is no value target for its observation;
    ``imitate=False`` fits the value function only, leaving the policy as it is):
    PPO then starts with a critic that knows what the cloned policy is worth, instead of a random
    one whose advantage estimates undo the cloned policy in the first iterations."""
    import torch
    from ray.rllib.core.columns import Columns

    if len(observations) != len(actions) or not observations:
        raise ValueError(f"need as many actions as observations (>0); got {len(observations)} "
                         f"observations and {len(actions)} actions")
    obs = _stack_obs(observations)
    act = torch.as_tensor(np.asarray(actions))
    ret = known = None
    if returns is not None:
        ret = torch.as_tensor(np.asarray(returns, dtype=np.float32))
        if ret.shape[0] != len(actions):
            raise ValueError(f"need one return per observation; got {ret.shape[0]} returns and "
                             f"{len(actions)} observations")
        finite = torch.isfinite(ret)
        if not bool(finite.any()):
            raise ValueError("every return is NaN: give at least one value target (or returns=None)")
        if not bool(finite.all()):
            known = finite  # NaN: no value target for that observation
        known_ret = ret if known is None else ret[known]
        ret_var = max(float(known_ret.var()) if known_ret.numel() > 1 else 1.0, 1e-6)
    dist_cls = module.get_train_action_dist_cls()
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    opt_v = torch.optim.Adam(params, lr=lr)  # value step (only parameters that get a gradient move)
    rng = np.random.default_rng(seed)
    n = len(actions)
    losses = []
    module.train()
    for _ in range(epochs):
        order = rng.permutation(n)
        tot, cnt = 0.0, 0
        for s in range(0, n, minibatch_size):
            idx = torch.as_tensor(order[s:s + minibatch_size])
            batch = {Columns.OBS: _index(obs, idx)}
            out = module.forward_train(batch)
            dist = dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS])
            loss = -dist.logp(act[idx]).mean()
            if imitate:
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
            else:
                loss = loss.detach() * 0.0
            if ret is not None:
                # the value head learns on the policy's (detached) features with its own optimiser
                # step: the shared encoder and the gradient clipping stay the imitation loss's
                emb = out.get(Columns.EMBEDDINGS)
                v = module.compute_values(batch, embeddings=emb.detach() if emb is not None else None)
                target = ret[idx]
                if known is not None:  # select before subtracting: a NaN target would poison the gradient
                    v, target = v[known[idx]], target[known[idx]]
                sq = (v - target) ** 2
                if sq.numel():
                    v_loss = sq.mean() / ret_var
                    opt_v.zero_grad()
                    v_loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt_v.step()
                    loss = loss + v_loss.detach()
            tot += float(loss.detach()) * len(idx)
            cnt += len(idx)
        losses.append(tot / cnt)
    return losses


def collect_single(env: Any, act_fn: Callable[[Any, dict], Any], *, episodes: int, seed: int,
                   encode: Callable[[Any], Any]) -> tuple[list, list]:
    """Roll out ``act_fn`` (raw-env action) on a flat-action env; returns (obs, flat actions,
    rewards, episode-end flags), one entry per step."""
    obs_l: list = []
    act_l: list = []
    rew_l: list = []
    end_l: list = []
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        done = False
        while not done:
            raw = act_fn(obs, info)
            flat = encode(raw)
            obs_l.append(obs)
            act_l.append(flat)
            obs, reward, term, trunc, info = env.step(flat)
            done = term or trunc
            rew_l.append(float(reward))
            end_l.append(bool(done))
    return obs_l, act_l, rew_l, end_l


def collect_cluster(env: Any, policy: Any, *, episodes: int, seed: int,
                    replicas: tuple[list, list] | None = None) -> tuple[list, list, list, list]:
    """Roll out a cluster policy (``act_all``; e.g. ``least_outstanding_requests`` with static
    replicas) on the ClusterEnv; returns the router's observations, actions, rewards (the reward of
    the interval that follows each decision, as the env pays it) and episode-end flags. With
    ``replicas`` = (observations, actions) lists, every replica agent's window observation and
    the baseline's knob action are appended to them (the replica module's demonstrations)."""
    obs_l: list = []
    act_l: list = []
    rew_l: list = []
    end_l: list = []
    if hasattr(policy, "bind"):
        policy.bind(env)
    for ep in range(episodes):
        if hasattr(policy, "reset"):
            policy.reset(seed + ep)
        obs, infos = env.reset(seed=seed + ep)
        while True:
            actions = policy.act_all(obs, infos)
            acted = "router" in obs
            if replicas is not None:
                for aid, o in obs.items():
                    if aid != "router":
                        replicas[0].append(o)
                        replicas[1].append(np.asarray(actions[aid], dtype=np.int64))
            if acted:
                obs_l.append(obs["router"])
                act_l.append(int(actions["router"]))
            obs, rewards, terms, truncs, infos = env.step(actions)
            done = bool(terms.get("__all__") or truncs.get("__all__"))
            if acted:
                rew_l.append(float(rewards.get("router", 0.0)))
                end_l.append(False)
            elif rew_l and "router" in rewards:  # paid without a decision (e.g. at episode end)
                rew_l[-1] += float(rewards["router"])
            if done:
                if end_l:
                    end_l[-1] = True
                break
    return obs_l, act_l, rew_l, end_l


def _dagger(cfg: Any, module: Any, teacher: Any, env: Any, obs: list, acts: list, *, value_targets: bool,
            out: Path, init_state: dict) -> list[float]:
    """``bc.dagger_rounds`` rounds of DAgger (:mod:`inferencegym.rl.dagger`) after the cloning: the
    student's visited states, labelled by the teacher, join the data, and the module trains on all
    of it again for ``bc.epochs`` epochs (minibatch seed ``cfg.seed + r``), continuing from its
    weights or, with ``bc.dagger_retrain: scratch``, from its initial weights ``init_state``.
    Value targets: only the student's states, with their returns under the student: PPO starts
    from the student, and a privileged teacher's returns overstate what the student can reach.
    Writes ``dagger.json`` (per round: seeds, samples, the student's agreement with the teacher,
    its mean episode return on the round's seeds)."""
    b = cfg.bc
    n_ep = b.dagger_episodes or b.episodes
    rng = np.random.default_rng(cfg.seed)
    obs, acts = list(obs), list(acts)
    rets: list[float] | None = [float("nan")] * len(acts) if value_targets else None
    losses: list[float] = []
    rounds = []
    for r in range(1, b.dagger_rounds + 1):
        module.eval()
        first, beta = round_seed(b.seed, b.episodes, n_ep, r), beta_for_round(b.dagger_beta, r)
        roll = collect_relabelled(env, student_actor(module, mode=b.dagger_student, rng=rng), teacher,
                                  episodes=n_ep, seed=first, beta=beta, rng=rng,
                                  encode=lambda a: action_to_flat(ServeAction.from_any(a)))
        obs += roll.obs
        acts += roll.labels
        if rets is not None:
            rets += [float(x) for x in discounted_returns(roll.rewards, roll.episode_ends, cfg.ppo.gamma)]
        if b.dagger_retrain == "scratch":
            module.load_state_dict(init_state)
        round_losses = bc_train(module, obs, acts, epochs=b.epochs, lr=b.lr, minibatch_size=b.minibatch_size,
                                seed=cfg.seed + r, returns=rets)
        losses += round_losses
        rounds.append({"round": r, "seeds": [first, first + n_ep - 1], "beta": beta,
                       "samples_added": len(roll.obs), "samples_total": len(obs),
                       "teacher_steps": int(sum(roll.teacher_acted)),
                       "student_agreement": roll.student_agreement(),
                       "student_mean_return": float(np.mean(roll.episode_returns())),
                       "final_loss": round_losses[-1]})
    (out / "dagger.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "dagger.json").write_text(json.dumps({"student": b.dagger_student, "retrain": b.dagger_retrain,
                                                 "rounds": rounds}, indent=2))
    return losses


def _distill(cfg: Any, module: Any, out: Path) -> list[float]:
    """Clone the teacher episodes in ``bc.demonstrations`` (``<task>_<seed>.npz`` from
    :func:`inferencegym.rl.distill.collect_lookahead`) on the student's stacked observations."""
    from inferencegym.rl.distill import load_demonstrations

    b = cfg.bc
    paths = sorted(Path(b.demonstrations).glob(f"{cfg.task_id}_*.npz"))
    if not paths:
        raise ValueError(f"bc.demonstrations: no {cfg.task_id}_*.npz in {b.demonstrations}; collect them with "
                         f"`python -m inferencegym.rl.distill --task {cfg.task_id} --out {b.demonstrations}`")
    mc = cfg.modules["default_policy"].model_config_
    windows = int(mc.get("history_windows", 0) or 0)
    if windows < 1:
        raise ValueError("bc.demonstrations needs model_config.history_windows >= 1 (the student's history)")
    obs, acts, summary = load_demonstrations(paths, windows=windows, ema_weight=float(mc.get("history_ema_weight", 0.3)),
                                             phase_task_id=cfg.task_id if mc.get("phase_features") else None,
                                             phase_level=max(int(mc.get("phase_features") or 0), 1))
    priv = int(mc.get("critic_privileged_dims", 0) or 0)
    if priv:  # slots the actor never reads
        obs = [np.concatenate([o, np.zeros(priv, np.float32)]) for o in obs]
    (out / "distill.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "distill.json").write_text(json.dumps({**summary, "files": [p.name for p in paths]}, indent=2))
    return bc_train(module, obs, acts, epochs=b.epochs, lr=b.lr, minibatch_size=b.minibatch_size, seed=cfg.seed)


def warm_start(cfg: Any, *, out_dir: str | Path, env: Any = None) -> dict[str, str]:
    """Run BC for the config's modules; returns {module_id: saved state dir} for ``load_state_path``."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    if env is not None:
        raise ValueError("BC warm start needs the real InferenceGym envs (env override given)")
    out = Path(out_dir)
    b = cfg.bc
    env_config = cfg.full_env_config()
    if cfg.env == "single":
        baseline = get_policy(b.baseline, cfg.task_id)
        # A privileged teacher (clairvoyant) reads info["oracle/*"]: only the collection env has it;
        # the student learns from observations, and the PPO envs are never privileged.
        e = make_single_env({**env_config, "privileged": is_privileged(baseline)})
        obs, acts, rews, ends = collect_single(e, lambda o, i: baseline.act(o, i), episodes=b.episodes, seed=b.seed,
                                   encode=lambda a: action_to_flat(ServeAction.from_any(a)))
        mid, obs_space, act_space = "default_policy", e.observation_space, e.action_space
    else:
        # demonstrations come from the full env (router included) even when PPO trains the replica
        # agents alone with an internal router
        e = make_cluster_env({k: v for k, v in env_config.items() if k != "internal_router"})
        if "router" not in cfg.policy_mapping:
            raise ValueError("BC for the cluster env imitates the router; policy_mapping has no 'router'")
        mid = cfg.policy_mapping["router"]
        rep_mid = _trained_replica_module(cfg)
        rep_demo: tuple[list, list] | None = ([], []) if rep_mid else None
        obs, acts, rews, ends = collect_cluster(e, get_cluster_policy(b.baseline), episodes=b.episodes,
                                                seed=b.seed, replicas=rep_demo)
        obs_space, act_space = e.observation_spaces["router"], e.action_spaces["router"]
    m = cfg.modules[mid]
    import torch

    torch.manual_seed(cfg.seed)  # the module's initial weights: one seed, one warm start
    module = RLModuleSpec(module_class=module_class(m.type), observation_space=obs_space,
                          action_space=act_space, model_config=dict(m.model_config_)).build()
    returns = discounted_returns(rews, ends, cfg.ppo.gamma) if b.value_warmup else None
    init = {k: v.detach().clone() for k, v in module.state_dict().items()} if b.dagger_rounds else None
    if b.demonstrations and cfg.env == "single":
        # distillation (rl/distill.py): the policy clones the privileged teacher's recorded episodes;
        # the baseline's episodes only fit the value function (the student's worth, not the teacher's)
        losses = _distill(cfg, module, out)
        if returns is not None:
            losses += bc_train(module, obs, acts, epochs=b.epochs, lr=b.lr, minibatch_size=b.minibatch_size,
                               seed=cfg.seed, returns=returns, imitate=False)
    else:
        losses = bc_train(module, obs, acts, epochs=b.epochs, lr=b.lr, minibatch_size=b.minibatch_size,
                          seed=cfg.seed, returns=returns)
    if b.dagger_rounds and cfg.env == "single":  # the config refuses DAgger on cluster envs
        losses += _dagger(cfg, module, baseline, e, obs, acts, value_targets=returns is not None, out=out,
                          init_state=init)
    path = out / mid
    module.save_to_path(str(path))
    (out / "bc_losses.txt").write_text("\n".join(f"{x:.6f}" for x in losses) + "\n")
    paths = {mid: str(path)}
    if cfg.env != "single" and rep_mid:
        # the trained replica module clones the baseline's replica policy (e.g. best_static_knobs'
        # fixed knobs) instead of starting at random or holding the task's initial knobs
        rm = cfg.modules[rep_mid]
        rid = e.replica_ids[0]
        torch.manual_seed(cfg.seed + 1)
        rep_module = RLModuleSpec(module_class=module_class(rm.type), observation_space=e.observation_spaces[rid],
                                  action_space=e.action_spaces[rid], model_config=dict(rm.model_config_)).build()
        rep_losses = bc_train(rep_module, rep_demo[0], rep_demo[1], epochs=b.epochs, lr=b.lr,
                              minibatch_size=b.minibatch_size, seed=cfg.seed + 1)
        rep_module.save_to_path(str(out / rep_mid))
        (out / "bc_losses_replica.txt").write_text("\n".join(f"{x:.6f}" for x in rep_losses) + "\n")
        paths[rep_mid] = str(out / rep_mid)
    return paths


def _trained_replica_module(cfg: Any) -> str | None:
    """The replica agents' module id when it is a learning module (not ``hold_knobs`` or
    ``replica_sticky``): BC then clones the baseline's replica actions into it too, whether PPO trains
    it or not (a frozen ``replica_mlp`` would otherwise play its random initialisation)."""
    rep = next((m for pat, m in cfg.policy_mapping.items() if pat.startswith("replica")), None)
    if rep is None or cfg.modules[rep].type in ("hold_knobs", "replica_sticky"):
        return None  # replica_sticky starts as hold_knobs by construction (rl/replica_modules.py)
    return rep
