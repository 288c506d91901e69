"""A served policy: an RLModule checkpoint loaded once, answering batches of observations greedily.

The endpoint and the in-process evaluation must act identically for the same observation, so the
policy here is deterministic (the inference distribution's ``to_deterministic()`` sample, i.e. the
argmax for categorical actions) and the JSON <-> array conversion is exact: float32 values survive a
trip through JSON unchanged (a float32 widened to float64, printed with ``repr`` and read back, is
the same float32).

Checkpoints are only ever loaded from a path given by the operator (CLI, config file), never from a
request body: ``RLModule.from_checkpoint`` unpickles the module's class and constructor arguments.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from inferencegym.apps.json_guard import scrub
from inferencegym.rl.policy_loader import PRETRAINED_DIR, load_policy

#: Where an Algorithm / Tune checkpoint keeps its modules.
RL_MODULE_SUBDIR = Path("learner_group") / "learner" / "rl_module"
#: Module ids tried, in order, when a checkpoint holds several modules and none is named.
PREFERRED_MODULE_IDS = ("default_policy", "router", "router_pol", "router_policy")


class ObservationError(ValueError):
    """An observation that does not fit the policy's observation space (HTTP 422)."""


# --------------------------------------------------------------------------------------------
# JSON <-> space conversion


def decode_observation(space: gym.Space, value: Any, where: str = "observation") -> Any:
    """Turn a JSON value (nested lists / dicts / numbers) into an element of ``space``.

    Raises :class:`ObservationError` naming the offending part (``where``), the expected shape and
    dtype, and what was given. Values are not clipped to the space's bounds: the module sees exactly
    what the env produced (Box bounds are often +-inf anyway)."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, dict):
            raise ObservationError(f"{where}: expected an object with keys {sorted(space.spaces)}, "
                                   f"got {type(value).__name__}")
        missing = sorted(set(space.spaces) - set(value))
        extra = sorted(set(value) - set(space.spaces))
        if missing or extra:
            raise ObservationError(f"{where}: expected keys {sorted(space.spaces)}; missing {missing}, "
                                   f"unexpected {extra}")
        return {k: decode_observation(s, value[k], f"{where}.{k}") for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, list) or len(value) != len(space.spaces):
            raise ObservationError(f"{where}: expected a list of {len(space.spaces)} parts")
        return tuple(decode_observation(s, v, f"{where}[{i}]") for i, (s, v) in enumerate(zip(space.spaces, value)))
    if isinstance(space, gym.spaces.Discrete):
        if (isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**62
                or not space.contains(np.int64(value))):
            raise ObservationError(f"{where}: expected an integer in [{space.start}, "
                                   f"{space.start + space.n - 1}], got {value!r:.40}")
        return np.int64(value)
    shape = tuple(space.shape) if space.shape is not None else None
    dtype = space.dtype if space.dtype is not None else np.float32
    _check_json_numbers(value, where)
    try:
        arr = np.asarray(value, dtype=np.float64 if np.issubdtype(dtype, np.floating) else np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ObservationError(f"{where}: expected numbers of shape {shape}, could not read it as an "
                               f"array ({str(exc)[:120]})") from None
    if arr.dtype == object:
        raise ObservationError(f"{where}: expected a rectangular array of shape {shape}, got ragged lists")
    if shape is not None and arr.shape != shape:
        raise ObservationError(f"{where}: expected shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ObservationError(f"{where}: contains NaN or infinity; observations must be finite")
    if np.issubdtype(dtype, np.floating):
        with np.errstate(over="ignore"):
            cast = arr.astype(dtype)
        if not np.all(np.isfinite(cast)):
            big = float(np.max(np.abs(arr)))
            raise ObservationError(f"{where}: {big:.3g} overflows {np.dtype(dtype).name} (largest "
                                   f"{float(np.finfo(dtype).max):.3g}); observations must fit the space's dtype")
    else:
        info = np.iinfo(dtype)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise ObservationError(f"{where}: values outside the range of {np.dtype(dtype).name}")
        cast = arr.astype(dtype)
    if where.rsplit(".", 1)[-1] == "action_mask":
        if arr.size and (arr.min() < 0.0 or arr.max() > 1.0):
            raise ObservationError(f"{where}: mask values must be in [0, 1], got values in "
                                   f"[{float(arr.min()):g}, {float(arr.max()):g}]")
        if not np.any(arr > 0.5):
            raise ObservationError(f"{where}: all-zero action mask: at least one action must be allowed")
    return cast


#: Integers in an observation are bounded by the number of decimal digits (a JSON integer can be
#: arbitrarily long; converting a 401-digit one to float raises OverflowError deep inside numpy).
MAX_INT_DIGITS = 18


def _check_json_numbers(value: Any, where: str, depth: int = 0) -> None:
    """Strict JSON numbers only: refuse strings (``"0.5"`` is not coerced), booleans, null,
    objects, huge integers and non-finite floats anywhere in a JSON array value."""
    if depth > 8:
        raise ObservationError(f"{where}: nested deeper than any observation space")
    if isinstance(value, list):
        for v in value:
            _check_json_numbers(v, where, depth + 1)
    elif isinstance(value, bool):
        raise ObservationError(f"{where}: expected numbers, got a boolean")
    elif isinstance(value, str):
        raise ObservationError(f"{where}: expected numbers, got a string ({scrub(repr(value), 24)}); "
                               f"send JSON numbers, not numeric strings")
    elif not isinstance(value, (int, float)):
        kind = "null" if value is None else type(value).__name__
        raise ObservationError(f"{where}: expected numbers, got {kind}")
    elif isinstance(value, int):
        if abs(value) >= 10 ** MAX_INT_DIGITS:
            raise ObservationError(f"{where}: integer with {len(str(abs(value)))} digits is out of "
                                   f"range; observations are float32/int64 values")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ObservationError(f"{where}: contains NaN or infinity; observations must be finite")


def encode_json(value: Any) -> Any:
    """numpy arrays / scalars / dicts / tuples -> plain JSON-able Python values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): encode_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_json(v) for v in value]
    return value


def space_to_dict(space: gym.Space | None) -> dict[str, Any] | None:
    """A JSON description of a gymnasium space (for ``GET /metadata``)."""
    if space is None:
        return None
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_dict(s) for k, s in space.spaces.items()}}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": encode_json(space.n)}
    if isinstance(space, gym.spaces.Box):
        low, high = space.low, space.high
        same = bool(np.all(low == low.flat[0]) and np.all(high == high.flat[0]))
        bound = (lambda a: _json_float(a.flat[0]) if same else [_json_float(x) for x in a.flat])
        return {"type": "Box", "shape": list(space.shape), "dtype": str(space.dtype),
                "low": bound(low), "high": bound(high)}
    return {"type": type(space).__name__, "repr": repr(space)}


def _json_float(x: Any) -> float | str:
    """JSON has no infinities: unbounded Box limits are written as the strings "inf" / "-inf"."""
    x = float(x)
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


def _stack(space: gym.Space, items: list[Any]) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _stack(s, [it[k] for it in items]) for k, s in space.spaces.items()}
    return np.stack([np.asarray(it) for it in items])


# --------------------------------------------------------------------------------------------
# Checkpoint resolution


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """The RLModule checkpoint inside ``path``.

    Accepts an RLModule checkpoint itself, an Algorithm / Tune checkpoint
    (``.../learner_group/learner/rl_module``), or a Tune trial directory (its latest
    ``checkpoint_*``)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"checkpoint {str(p)!r} does not exist; give the directory written by "
                         f"training (a Tune checkpoint_* dir or an RLModule save_to_path dir)")
    if (p / RL_MODULE_SUBDIR).is_dir():
        return p / RL_MODULE_SUBDIR
    if (p / "class_and_ctor_args.pkl").exists():
        return p
    ckpts = sorted(p.glob("checkpoint_*"))
    if ckpts and (ckpts[-1] / RL_MODULE_SUBDIR).is_dir():
        return ckpts[-1] / RL_MODULE_SUBDIR
    raise ValueError(f"{str(p)!r} is not an RLModule, Algorithm or Tune trial checkpoint (no "
                     f"class_and_ctor_args.pkl, no {RL_MODULE_SUBDIR}, no checkpoint_*)")


def checkpoint_version(path: Path) -> str:
    """Content hash of a checkpoint directory (first 12 hex digits of a sha256): the policy's version."""
    h = hashlib.sha256()
    for f in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _pick_module(multi: Any, module_id: str | None) -> tuple[Any, str]:
    ids = list(multi.keys())
    if module_id is not None:
        if module_id not in ids:
            raise ValueError(f"unknown module_id {module_id!r}; the checkpoint has: {', '.join(ids)}")
        return multi[module_id], module_id
    if len(ids) == 1:
        return multi[ids[0]], ids[0]
    for mid in PREFERRED_MODULE_IDS:
        if mid in ids:
            return multi[mid], mid
    raise ValueError(f"the checkpoint holds several modules ({', '.join(ids)}); choose one with "
                     f"module_id / --module-id")


# --------------------------------------------------------------------------------------------
# The policy


@dataclass
class ServedPolicy:
    """A greedy RLModule policy: ``act_batch(observations) -> actions``.

    Build it with :meth:`from_spec` (``checkpoint:PATH`` or ``pretrained:TASK``) or
    :meth:`from_module` (an in-process module, e.g. in tests)."""

    module: Any
    spec: str
    task_id: str | None = None
    module_id: str | None = None
    checkpoint: str | None = None
    version: str = "unversioned"
    observation_space: gym.Space | None = field(default=None)
    action_space: gym.Space | None = field(default=None)

    @classmethod
    def from_spec(cls, spec: str, task_id: str | None = None, module_id: str | None = None) -> "ServedPolicy":
        """Load ``checkpoint:PATH`` or ``pretrained:TASK`` (the task defaults to the pretrained one)."""
        scheme, _, rest = spec.partition(":")
        if scheme == "pretrained" and rest:
            # The packaged pickle-free format is read by the training package's loader.

            loaded_policy = load_policy(spec, task_id or rest)
            mid = module_id or loaded_policy.module_id
            if mid not in loaded_policy.modules:
                raise ValueError(f"unknown module_id {mid!r}; pretrained:{rest} has: "
                                 f"{', '.join(loaded_policy.modules)}")
            return cls.from_module(loaded_policy.modules[mid], spec=spec, task_id=task_id or rest,
                                   module_id=mid, checkpoint=str(PRETRAINED_DIR / rest),
                                   version=checkpoint_version(PRETRAINED_DIR / rest))
        if scheme != "checkpoint" or not rest:
            raise ValueError(f"cannot serve policy spec {spec!r}; valid: 'checkpoint:PATH' or "
                             f"'pretrained:TASK'")
        ckpt = resolve_checkpoint(Path(rest))
        from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
        from ray.rllib.core.rl_module.rl_module import RLModule

        try:
            loaded = RLModule.from_checkpoint(str(ckpt))
        except Exception as exc:  # junk or foreign file: unpickling, missing state, wrong format
            raise ValueError(f"checkpoint {ckpt} could not be loaded as an RLModule "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); give a "
                             f"directory written by training") from None
        if isinstance(loaded, MultiRLModule):
            module, module_id = _pick_module(loaded, module_id)
        else:
            module = loaded
            module_id = module_id or ckpt.name
        return cls.from_module(module, spec=spec, task_id=task_id, module_id=module_id,
                               checkpoint=str(ckpt), version=checkpoint_version(ckpt))

    @classmethod
    def from_module(cls, module: Any, *, spec: str = "module", task_id: str | None = None,
                    module_id: str | None = None, checkpoint: str | None = None,
                    version: str = "unversioned") -> "ServedPolicy":
        if module.is_stateful():  # e.g. type lstm: its state would need a session per client
            raise ValueError(f"policy {spec!r} is recurrent (module {module_id!r} carries a state from "
                             "window to window); the endpoint is stateless: serve a feed-forward module "
                             "(type mlp, history_windows for history) or evaluate it in-process")
        module.eval()
        return cls(module=module, spec=spec, task_id=task_id, module_id=module_id,
                   checkpoint=checkpoint, version=version,
                   observation_space=module.observation_space, action_space=module.action_space)

    # -- inference ------------------------------------------------------------------------

    def decode(self, values: list[Any], batched: bool = True) -> list[Any]:
        """JSON observations -> arrays of the observation space (ObservationError on a bad one)."""
        if self.observation_space is None:
            return [np.asarray(v, dtype=np.float32) for v in values]
        return [decode_observation(self.observation_space, v,
                                   f"observations[{i}]" if batched else "observation")
                for i, v in enumerate(values)]

    def act_batch(self, observations: list[Any]) -> list[Any]:
        """Greedy actions for decoded observations, one forward pass for the whole batch."""
        if not observations:
            return []
        import torch
        from ray.rllib.core.columns import Columns

        batch = _stack(self.observation_space, observations) if self.observation_space is not None \
            else np.stack(observations)
        obs_t = ({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}
                 if isinstance(batch, dict) else torch.from_numpy(np.ascontiguousarray(batch)))
        with torch.no_grad():
            out = self.module.forward_inference({Columns.OBS: obs_t})
            if Columns.ACTIONS in out:
                actions = out[Columns.ACTIONS]
            else:
                dist_cls = self.module.get_inference_action_dist_cls()
                actions = dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS]).to_deterministic().sample()
        arr = actions.cpu().numpy()
        return [encode_json(a) for a in arr]

    def act(self, observation: Any, info: Any = None) -> Any:
        """One observation -> one action (the in-process twin of ``HTTPPolicy.act``)."""
        return self.act_batch([observation])[0]

    def metadata(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "policy": self.spec, "module_id": self.module_id,
                "checkpoint": self.checkpoint, "policy_version": self.version,
                "observation_space": space_to_dict(self.observation_space),
                "action_space": space_to_dict(self.action_space)}
