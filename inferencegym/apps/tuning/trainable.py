"""The objective and the Tune trainable of a sweep: PPO with the trial's values, graded on held-out seeds."""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from ray import tune

from inferencegym.apps.tuning.schema import OBJECTIVE, SweepSpec, apply_params
from inferencegym.evaluation.cluster import evaluate_cluster_policy
from inferencegym.evaluation.single import evaluate_policy
from inferencegym.rl.policy_loader import ModulePolicy
from inferencegym.rl.train import build_ppo_config


def _num(x: Any) -> float:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return math.nan
    return f


def evaluate_module(module: Any, cfg: Any, *, episodes: int, seed: int) -> dict[str, Any]:
    """Grade a module's greedy policy on ``cfg.task_id`` with seeds ``seed .. seed+episodes-1``.

    Uses the same evaluation as ``inferencegym evaluate`` (default reward config: the grade does not
    depend on the reward weights)."""
    module = copy.deepcopy(module)
    if cfg.env == "cluster":
        router_id = cfg.policy_mapping.get("router") or next(m for m in cfg.modules if "router" in m)
        policy = ModulePolicy({router_id: module}, task_id=cfg.task_id, kind="cluster", source="sweep",
                              mapping={"router": router_id})
        return evaluate_cluster_policy(policy, cfg.task_id, episodes=episodes, seed=seed)
    policy = ModulePolicy({"default_policy": module}, task_id=cfg.task_id, kind="single", source="sweep")
    return evaluate_policy(policy, cfg.task_id, episodes=episodes, seed=seed).to_json_dict()


def acting_module_id(cfg: Any) -> str:
    if cfg.env == "single":
        return "default_policy"
    return cfg.policy_mapping.get("router") or next(m for m in cfg.modules if "router" in m)


def make_trainable(spec: SweepSpec, base_cfg: Any, env: Any = None,
                   warm_start_paths: dict[str, str] | None = None) -> Any:
    """The Tune trainable of a sweep: PPO built from the base config with the trial's values,
    reporting ``eval/grade_score`` (plus the training metrics) every iteration.

    ``warm_start_paths`` (module id -> behaviour-cloned module state, as ``train`` makes): every trial
    starts from these weights and, with ``fine_tune.teacher_kl_coeff``, keeps them as its teacher,
    exactly as ``inferencegym train`` does."""
    class SweepTrainable(tune.Trainable):
        def setup(self, config: dict[str, Any]) -> None:
            torch.set_num_threads(1)
            self.cfg = apply_params(base_cfg, {**spec.overrides, **config})
            paths = dict(warm_start_paths) if warm_start_paths else None
            self.algo = build_ppo_config(self.cfg, env=env, load_state_paths=paths,
                                         teacher_paths=paths).build_algo()
            self.module_id = acting_module_id(self.cfg)
            self.last_eval: dict[str, float] = {}

        def step(self) -> dict[str, Any]:
            result = self.algo.train()
            it = self.iteration + 1
            if it % spec.evaluation.every == 0 or it >= spec.iterations or not self.last_eval:
                t0 = time.perf_counter()
                ev = evaluate_module(self.algo.get_module(self.module_id), self.cfg,
                                     episodes=spec.evaluation.episodes, seed=spec.evaluation.seed)
                self.last_eval = {OBJECTIVE: float(ev["score_mean"]),
                                  "eval/grade_ci95": float(ev["score_ci95"]),
                                  "eval/ttft_p99_s": _num(ev.get("ttft_p99_s")),
                                  "eval/throughput_tok_s": _num(ev.get("throughput_tok_s")),
                                  "eval/wall_s": time.perf_counter() - t0}
            er = result.get("env_runners", {}) or {}
            out = {k: v for k, v in result.items() if k not in ("config",)}
            out.update(self.last_eval)
            out["train/episode_return_mean"] = _num(er.get("episode_return_mean"))
            out["train/grade_score"] = _num(er.get("grade/score"))
            return out

        def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
            self.algo.save_to_path(checkpoint_dir)
            Path(checkpoint_dir, "sweep_eval.json").write_text(json.dumps(self.last_eval))
            return None  # type: ignore[return-value]

        def load_checkpoint(self, checkpoint: Any) -> None:
            path = checkpoint if isinstance(checkpoint, str) else getattr(checkpoint, "path", checkpoint)
            self.algo.restore_from_path(path)
            f = Path(path, "sweep_eval.json")
            if f.is_file():
                self.last_eval = json.loads(f.read_text())

        def cleanup(self) -> None:
            self.algo.stop()

    SweepTrainable.__name__ = SweepTrainable.__qualname__ = "SweepTrainable"
    return SweepTrainable
