"""Load trained policies: ``checkpoint:PATH`` and ``pretrained:TASK`` -> an object with ``act(obs, info)``.

- ``checkpoint:PATH``: a checkpoint written by ``inferencegym train`` (Tune/Algorithm checkpoint dir,
  its ``learner_group/learner/rl_module`` dir, or a single module dir). Loaded with
  ``RLModule.from_checkpoint`` (RLlib's format pickles the module class by reference: load only
  checkpoints you made or trust; never from a request body).
- ``pretrained:TASK``: the module shipped in ``inferencegym/data/pretrained/<TASK>/``, in a pickle-free
  export format: ``module.json`` (module type from :data:`inferencegym.rl.modules.MODULE_TYPES`,
  ``model_config``, module id, task) plus ``weights.pt`` read with ``torch.load(weights_only=True)``.
  The module is rebuilt from the task's env spaces. :func:`export_module` writes the format.

Actions are greedy (the mode of the action distribution). A recurrent module (``type: lstm``) keeps
its state per module between ``act`` calls, from its initial state after every ``reset``. Single-agent policies return a
``ServeAction`` (the flat MultiDiscrete index decoded with the env package's ``flat_to_action``);
router policies return a replica index (``int``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from inferencegym.envs.actions import flat_to_action
from inferencegym.envs.history import HistoryStacker
from inferencegym.rl.env_creators import make_cluster_env, make_single_env
from inferencegym.rl.modules import module_class
from inferencegym.tasks.spec import get_task

PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "data" / "pretrained"
EXPORT_VERSION = 1


def list_pretrained() -> list[str]:
    """Tasks with a shipped pretrained module."""
    if not PRETRAINED_DIR.is_dir():
        return []
    return sorted(p.name for p in PRETRAINED_DIR.iterdir() if (p / "module.json").is_file())


def _task_kind(task_id: str) -> str:
    from inferencegym.tasks.control import CONTROL_TASKS

    if task_id in CONTROL_TASKS:
        return "control"
    kind = getattr(get_task(task_id), "kind", "single")
    return "cluster" if kind == "cluster" else "single"


def _to_batch(obs: Any) -> Any:
    import torch

    if isinstance(obs, dict):
        return {k: torch.as_tensor(np.asarray(v, dtype=np.float32))[None] for k, v in obs.items()}
    return torch.as_tensor(np.asarray(obs, dtype=np.float32))[None]


def _map_tensors(fn: Any, tree: Any) -> Any:
    """``fn`` applied to every leaf of a (nested) dict of tensors."""
    if isinstance(tree, dict):
        return {k: _map_tensors(fn, v) for k, v in tree.items()}
    return fn(tree)


class ModulePolicy:
    """A trained RLModule as a policy: ``act(obs, info=None)``; ``act_agent(agent_id, obs)`` for the
    cluster env's other agents. Attributes: ``module`` (the acting module), ``modules`` (id ->
    module), ``task_id``, ``kind``, ``source``, ``version``."""

    def __init__(self, modules: dict[str, Any], *, task_id: str, kind: str, source: str,
                 mapping: dict[str, str] | None = None) -> None:
        import torch

        torch.set_num_threads(1)
        self.modules = modules
        for m in modules.values():
            m.eval()
        self.task_id = task_id
        self.kind = kind
        self.source = source
        self.mapping = mapping or {}
        self.module_id = self._main_module_id()
        self.module = modules[self.module_id]
        self.version = source
        self.name = source
        self._priv = 0
        self._history = self._history_stacker()
        self._states: dict[int, Any] = {}  # id(module) -> recurrent state (batch of 1)

    def _history_stacker(self) -> HistoryStacker | None:
        """The single-agent module's observation history (``model_config.history_windows``)."""
        mc = getattr(self.module, "model_config", None) or {}
        windows = int(mc.get("history_windows", 0) or 0) if isinstance(mc, dict) else 0
        if self.kind != "single" or windows <= 0:
            return None
        from inferencegym.envs.phase_detector import phase_feature_dim

        phase = int(mc.get("phase_features", 0) or 0)
        self._priv = int(mc.get("critic_privileged_dims", 0) or 0)
        dim = (int(np.prod(self.module.observation_space.shape)) - phase_feature_dim(phase)
               - self._priv) // (windows + 1)
        return HistoryStacker(dim, windows, float(mc.get("history_ema_weight", 0.3)),
                              self.task_id if phase else None, max(phase, 1))

    def _input(self, obs: Any) -> Any:
        """The raw env observation, stacked with the episode's history when the module uses one."""
        if self._history is None:
            return obs
        arr = np.asarray(obs, dtype=np.float32)
        if arr.shape == self.module.observation_space.shape:  # already stacked (the training env)
            return arr
        x = self._history.push(arr)
        if self._priv:  # the asymmetric critic's privileged slots: the actor never reads them
            x = np.concatenate([x, np.zeros(self._priv, np.float32)])
        return x

    def _main_module_id(self) -> str:
        if self.kind == "control":
            return next(iter(self.modules))
        if self.kind == "single":
            return "default_policy" if "default_policy" in self.modules else next(iter(self.modules))
        mid = self.mapping.get("router")
        if mid is None:
            cands = [k for k in self.modules if "router" in k]
            if not cands:
                raise ValueError(f"no router module in {sorted(self.modules)}")
            mid = cands[0]
        return mid

    def reset(self, seed: int | None = None) -> None:
        """Start of an episode: forget the observation history and the recurrent state (the
        policy is otherwise greedy and stateless)."""
        if self._history is not None:
            self._history.reset()
        self._states.clear()

    def module_for(self, agent_id: str) -> Any:
        if agent_id in self.mapping:
            return self.modules[self.mapping[agent_id]]
        prefix = agent_id.rsplit("_", 1)[0]
        for mid in self.modules:
            if mid.startswith(prefix) or (agent_id.startswith("replica") and "replica" in mid):
                return self.modules[mid]
        raise ValueError(f"no module for agent {agent_id!r}; modules: {sorted(self.modules)}")

    def _greedy(self, module: Any, obs: Any) -> np.ndarray:
        import torch
        from ray.rllib.core.columns import Columns

        batch = {Columns.OBS: _to_batch(obs)}
        stateful = module.is_stateful()
        if stateful:  # (B=1, T=1, ...) and the state carried from the previous call
            state = self._states.get(id(module))
            if state is None:
                state = _map_tensors(lambda s: torch.as_tensor(s)[None], module.get_initial_state())
            batch = {Columns.OBS: _map_tensors(lambda x: x[:, None], batch[Columns.OBS]), Columns.STATE_IN: state}
        with torch.no_grad():
            out = module.forward_inference(batch)
            logits = out[Columns.ACTION_DIST_INPUTS]
            if stateful:
                self._states[id(module)] = out[Columns.STATE_OUT]
                logits = logits[:, 0]
            dist = module.get_inference_action_dist_cls().from_logits(logits)
            return np.asarray(dist.to_deterministic().sample()[0])

    def act(self, obs: Any, info: dict | None = None) -> Any:
        a = self._greedy(self.module, self._input(obs))
        if self.kind in ("cluster", "control"):
            return int(a)

        return flat_to_action(a)

    def act_flat(self, obs: Any) -> np.ndarray:
        """The raw module action (flat MultiDiscrete index for the single-agent env)."""
        return self._greedy(self.module, self._input(obs))

    def act_agent(self, agent_id: str, obs: Any) -> Any:
        a = self._greedy(self.module_for(agent_id), obs)
        return int(a) if a.ndim == 0 else a

    def act_all(self, obs: dict, infos: dict | None = None) -> dict:
        """Cluster env: every agent in ``obs`` answered by its module: the router module routes, the
        replica module sets the replica's knobs (a ``hold_knobs`` module, or none, keeps the
        replica's current knobs from ``infos[agent]["knobs"]``, as ``replica_static`` does)."""
        from inferencegym.rl.modules import HoldKnobsModule

        if self.kind != "cluster":
            raise ValueError("act_all is for cluster policies (a router and replica agents)")
        infos = infos or {}
        out: dict[str, Any] = {}
        for aid, o in obs.items():
            if aid == "router":
                out[aid] = self.act(o, infos.get(aid))
                continue
            try:
                module = self.module_for(aid)
            except ValueError:
                module = None
            if module is None or isinstance(module, HoldKnobsModule):
                info = infos.get(aid) or {}
                if "knobs" not in info:
                    raise ValueError(f"{aid}: holding knobs needs info['knobs'] from ClusterEnv")
                out[aid] = np.asarray(info["knobs"], dtype=np.int64)
            else:
                out[aid] = np.asarray(self._greedy(module, o), dtype=np.int64)
        return out

    def __call__(self, obs: Any, info: dict | None = None) -> Any:
        return self.act(obs, info)


def _spaces_for(task_id: str, kind: str, module_id: str, mapping: dict[str, str],
                model_config: dict | None = None, control: dict | None = None) -> tuple[Any, Any]:
    if kind == "control":  # a control-plane agent: spaces from the task and the export's feature set
        from inferencegym.rl.control_spaces import control_spaces

        return control_spaces(task_id, **(control or {}))
    if kind == "single":
        mc = model_config or {}
        hist = ({"history_windows": int(mc["history_windows"]),
                 "history_ema_weight": float(mc.get("history_ema_weight", 0.3)),
                 "phase_features": int(mc.get("phase_features", 0) or 0)}
                if int(mc.get("history_windows", 0) or 0) > 0 else {})
        if int(mc.get("critic_privileged_dims", 0) or 0) > 0:  # the space the module was built on
            hist["privileged_critic"] = True
        env = make_single_env({"task_id": task_id, **hist})
        try:
            return env.observation_space, env.action_space
        finally:
            env.close()
    env = make_cluster_env({"task_id": task_id})
    agents = [a for a in env.possible_agents if mapping.get(a) == module_id]
    if not agents:
        agents = [a for a in env.possible_agents
                  if any(p.endswith("*") and a.startswith(p[:-1]) and m == module_id for p, m in mapping.items())]
    if not agents:
        raise ValueError(f"module {module_id!r} is mapped to no agent of the cluster env ({mapping})")
    return env.observation_spaces[agents[0]], env.action_spaces[agents[0]]


def export_module(module: Any, out_dir: str | Path, *, module_type: str, model_config: dict, module_id: str,
                  task_id: str, kind: str, mapping: dict[str, str] | None = None, extra: dict | None = None) -> Path:
    """Write a module in the pickle-free pretrained format (``module.json`` + ``weights.pt``).

    Several modules of one task go in subfolders named by module id (``<out_dir>/<module_id>/``)
    with the top ``module.json`` listing them."""
    import torch

    out = Path(out_dir)
    sub = out / module_id
    sub.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()}, sub / "weights.pt")
    (sub / "module.json").write_text(json.dumps({"type": module_type, "model_config": model_config}, indent=2))
    top = out / "module.json"
    meta = json.loads(top.read_text()) if top.is_file() else {"version": EXPORT_VERSION, "modules": []}
    meta.update({"task_id": task_id, "kind": kind, "mapping": mapping or {}, **(extra or {})})
    if module_id not in meta["modules"]:
        meta["modules"].append(module_id)
    top.write_text(json.dumps(meta, indent=2))
    return out


def load_exported(path: str | Path, task_id: str | None = None) -> ModulePolicy:
    """Load the pickle-free format written by :func:`export_module`."""
    import torch
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec


    root = Path(path)
    meta = json.loads((root / "module.json").read_text())
    if meta.get("version") != EXPORT_VERSION:
        raise ValueError(f"{root}: export version {meta.get('version')} is not {EXPORT_VERSION}")
    task = meta["task_id"]
    if task_id is not None and task_id != task:
        raise ValueError(f"pretrained module {root} was trained on task {task!r}, not {task_id!r}")
    kind, mapping = meta["kind"], meta.get("mapping", {})
    modules = {}
    for mid in meta["modules"]:
        sub = json.loads((root / mid / "module.json").read_text())
        obs_space, act_space = _spaces_for(task, kind, mid, mapping, sub["model_config"], meta.get("control"))
        m = RLModuleSpec(module_class=module_class(sub["type"]), observation_space=obs_space,
                         action_space=act_space, model_config=sub["model_config"]).build()
        state = torch.load(root / mid / "weights.pt", weights_only=True, map_location="cpu")
        m.load_state_dict(state)
        modules[mid] = m
    policy = ModulePolicy(modules, task_id=task, kind=kind, source=f"pretrained:{task}", mapping=mapping)
    policy.meta = meta
    return policy


def _is_checkpointable(path: Path) -> bool:
    """An RLlib checkpoint directory of some component (algorithm, learner group, RLModule, ...)."""
    return (path / "metadata.json").is_file() or (path / "class_and_ctor_args.pkl").is_file()


def _rl_module_dir(path: Path) -> Path:
    for cand in (path / "learner_group" / "learner" / "rl_module", path):
        if _is_checkpointable(cand):
            return cand
    raise FileNotFoundError(f"{path} is not an RLlib checkpoint: expected {path}/learner_group/learner/rl_module "
                            "or an RLModule directory (with class_and_ctor_args.pkl)")


def load_checkpoint(path: str | Path, task_id: str) -> ModulePolicy:
    """Load an RLlib checkpoint with ``RLModule.from_checkpoint`` (local, trusted paths only): a training
    checkpoint, one RLModule directory, or a directory of RLModule directories (behaviour cloning's output:
    a router module and a replica module, loaded together)."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
    from ray.rllib.core.rl_module.rl_module import RLModule

    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"checkpoint {p} does not exist")
    p = p.resolve()  # RLlib reads the directory through pyarrow, which refuses relative paths
    # a plain directory (no checkpoint of its own) holding module directories: load them all
    subdirs = ([] if _is_checkpointable(p) or (p / "learner_group").is_dir() or not p.is_dir()
               else sorted(d for d in p.iterdir() if d.is_dir() and _is_checkpointable(d)))
    modules = {}
    for mdir in subdirs or [_rl_module_dir(p)]:
        try:
            loaded = RLModule.from_checkpoint(str(mdir))
        except Exception as exc:  # a junk or foreign file: unpickling, missing state, wrong format
            raise ValueError(f"checkpoint {p} could not be loaded as an RLModule ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:200]}); give a directory written by "
                             f"training") from None
        modules.update({mid: loaded[mid] for mid in loaded.keys()} if isinstance(loaded, MultiRLModule)
                       else {mdir.name: loaded})
    kind = _task_kind(task_id)
    mapping = {"router": next((k for k in modules if "router" in k), "")} if kind == "cluster" else {}
    return ModulePolicy(modules, task_id=task_id, kind=kind, source=f"checkpoint:{p}", mapping=mapping)


def load_policy(spec: str, task_id: str) -> ModulePolicy:
    """``checkpoint:PATH`` or ``pretrained:TASK`` -> :class:`ModulePolicy` for ``task_id``."""
    scheme, _, rest = spec.partition(":")
    if not rest:
        raise ValueError(f"policy spec {spec!r} must be checkpoint:PATH or pretrained:TASK")
    if scheme == "checkpoint":
        return load_checkpoint(rest, task_id)
    if scheme == "pretrained":
        avail = list_pretrained()
        if rest not in avail:  # first: an unknown name is a typo, whatever task is evaluated
            raise ValueError(f"no pretrained policy for task {rest[:80]!r}; available: "
                             f"{', '.join(avail) or '(none)'} (use pretrained:TASK with --task TASK)")
        if rest != task_id:
            raise ValueError(f"pretrained:{rest} is a policy for task {rest!r}; the evaluated task is "
                             f"{task_id!r}: use --task {rest} or pretrained:{task_id}"
                             + ("" if task_id in avail else f" (no pretrained policy for {task_id!r}; "
                                                            f"available: {', '.join(avail)})"))
        return load_exported(PRETRAINED_DIR / rest, task_id)
    raise ValueError(f"unknown policy scheme {scheme!r} in {spec!r}; valid: checkpoint:PATH, pretrained:TASK")
