"""The served policy without Ray: JSON <-> space conversion, body schema, checkpoint loading."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from pydantic import ValidationError

from inferencegym.apps.policy_endpoint.policy import (ObservationError, ServedPolicy, decode_observation,
                                         encode_json, resolve_checkpoint, space_to_dict)
from inferencegym.apps.policy_endpoint.schemas import ActRequest

BOX = gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)
DICT = gym.spaces.Dict({"replicas": gym.spaces.Box(-np.inf, np.inf, (3, 4), np.float32),
                        "request": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
                        "action_mask": gym.spaces.Box(0.0, 1.0, (3,), np.float32)})


def _mlp_module(obs_space=BOX, act_space=gym.spaces.MultiDiscrete([4, 3])):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import MLPModule

    torch.manual_seed(0)
    return RLModuleSpec(module_class=MLPModule, observation_space=obs_space, action_space=act_space,
                        model_config={"hidden": [16]}).build()


def test_float32_survives_json_round_trip():
    rng = np.random.default_rng(0)
    obs = (rng.normal(size=6) * 10.0 ** rng.integers(-8, 8, size=6)).astype(np.float32)
    back = decode_observation(BOX, json.loads(json.dumps(encode_json(obs))))
    assert back.dtype == np.float32
    assert np.array_equal(back, obs)


def test_decode_dict_observation_and_errors():
    rng = np.random.default_rng(1)
    obs = {k: s.sample() for k, s in DICT.spaces.items()}
    obs["action_mask"] = np.ones(3, np.float32)  # an unseeded random mask is all-zero (refused) 1 time in 8
    back = decode_observation(DICT, json.loads(json.dumps(encode_json(obs))))
    assert all(np.array_equal(back[k], obs[k]) for k in obs)
    bad = encode_json(obs)
    bad["replicas"] = rng.normal(size=(2, 4)).tolist()
    with pytest.raises(ObservationError, match=r"observation\.replicas: expected shape \(3, 4\), got \(2, 4\)"):
        decode_observation(DICT, bad)
    with pytest.raises(ObservationError, match=r"missing \['request'\]"):
        decode_observation(DICT, {k: v for k, v in encode_json(obs).items() if k != "request"})
    with pytest.raises(ObservationError, match="ragged|could not read"):
        decode_observation(BOX, [[1.0, 2.0], [3.0]])
    with pytest.raises(ObservationError, match="expected numbers"):
        decode_observation(BOX, ["a", "b", "c", "d", "e", "f"])


def test_act_request_schema():
    assert ActRequest(observation=[1.0]).items() == [[1.0]]
    assert ActRequest(observations=[[1.0], [2.0]]).batched
    with pytest.raises(ValidationError, match="exactly one"):
        ActRequest()
    with pytest.raises(ValidationError, match="exactly one"):
        ActRequest(observation=[1.0], observations=[[1.0]])
    with pytest.raises(ValidationError, match="empty"):
        ActRequest(observations=[])
    with pytest.raises(ValidationError, match="Extra inputs"):
        ActRequest.model_validate({"observation": [1.0], "explore": True})


def test_served_policy_matches_module_greedy_actions(tmp_path):
    from ray.rllib.core.columns import Columns

    module = _mlp_module()
    module.save_to_path(tmp_path / "ckpt")
    policy = ServedPolicy.from_spec(f"checkpoint:{tmp_path / 'ckpt'}", task_id="t")
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(20, 6)).astype(np.float32)
    with torch.no_grad():
        logits = module.forward_inference({Columns.OBS: torch.from_numpy(obs)})[Columns.ACTION_DIST_INPUTS]
    # MultiDiscrete([4, 3]): greedy = argmax of each head's slice of the logits.
    expected = np.stack([logits[:, :4].argmax(-1).numpy(), logits[:, 4:].argmax(-1).numpy()], axis=1)
    assert np.array_equal(np.asarray(policy.act_batch(list(obs))), expected)
    assert [policy.act(o) for o in obs] == policy.act_batch(list(obs))  # batching does not change actions
    meta = policy.metadata()
    assert meta["task_id"] == "t" and meta["action_space"] == {"type": "MultiDiscrete", "nvec": [4, 3]}
    assert meta["observation_space"]["shape"] == [6] and len(meta["policy_version"]) == 12


def test_version_is_content_hash(tmp_path):
    _mlp_module().save_to_path(tmp_path / "a")
    _mlp_module().save_to_path(tmp_path / "b")  # same seed -> same weights
    from inferencegym.apps.policy_endpoint.policy import checkpoint_version

    assert checkpoint_version(tmp_path / "a") == checkpoint_version(tmp_path / "b")
    torch.manual_seed(1)
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import MLPModule

    RLModuleSpec(module_class=MLPModule, observation_space=BOX, action_space=gym.spaces.MultiDiscrete([4, 3]),
                 model_config={"hidden": [16]}).build().save_to_path(tmp_path / "c")
    assert checkpoint_version(tmp_path / "c") != checkpoint_version(tmp_path / "a")


def test_bad_specs_and_checkpoints(tmp_path):
    with pytest.raises(ValueError, match="valid: 'checkpoint:PATH' or 'pretrained:TASK'"):
        ServedPolicy.from_spec("heuristic")
    with pytest.raises(ValueError, match="does not exist"):
        resolve_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is not an RLModule"):
        resolve_checkpoint(tmp_path / "empty")
    with pytest.raises(ValueError, match="no pretrained policy for task 'no_such_task'"):
        ServedPolicy.from_spec("pretrained:no_such_task")


def test_space_to_dict_is_json():
    d = space_to_dict(DICT)
    assert json.loads(json.dumps(d))["spaces"]["replicas"]["shape"] == [3, 4]
    assert space_to_dict(gym.spaces.Discrete(5)) == {"type": "Discrete", "n": 5, "start": 0}


def test_dict_observation_router_batches_like_single_calls(tmp_path):
    """A cluster router (Dict observation, Discrete action) served from a checkpoint: batched JSON
    observations give the in-process ModulePolicy's replica index for each one."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from inferencegym.rl.modules import ReplicaAttentionRouter
    from inferencegym.rl.policy_loader import ModulePolicy

    torch.manual_seed(0)
    router = RLModuleSpec(module_class=ReplicaAttentionRouter, observation_space=DICT,
                          action_space=gym.spaces.Discrete(3),
                          model_config={"embed_dim": 8, "num_heads": 2, "hidden": 16}).build()
    router.save_to_path(tmp_path / "router")
    served = ServedPolicy.from_spec(f"checkpoint:{tmp_path / 'router'}")
    reference = ModulePolicy({"router": router}, task_id="cluster_routing", kind="cluster", source="t",
                             mapping={"router": "router"})
    rng = np.random.default_rng(3)
    observations = []
    for i in range(12):
        obs = {"replicas": rng.normal(size=(3, 4)).astype(np.float32),
               "request": rng.uniform(size=2).astype(np.float32),
               "action_mask": np.array([1, 1, 1] if i % 3 else [0, 1, 1], dtype=np.float32)}
        observations.append(obs)
    wire = json.loads(json.dumps([encode_json(o) for o in observations]))
    actions = served.act_batch(served.decode(wire))
    assert actions == [reference.act(o) for o in observations]
    assert all(a != 0 for a, o in zip(actions, observations) if o["action_mask"][0] == 0)  # mask respected
    assert served.metadata()["observation_space"]["type"] == "Dict"


def test_serve_cli_refuses_bad_checkpoint_before_starting_ray(tmp_path):
    from typer.testing import CliRunner

    from inferencegym.cli import app

    res = CliRunner().invoke(app, ["serve", "--policy", f"checkpoint:{tmp_path / 'nope'}"])
    assert res.exit_code == 2 and "does not exist" in " ".join(res.output.split())  # rich wraps lines
    res = CliRunner().invoke(app, ["serve", "--policy", "heuristic"])
    assert res.exit_code == 2 and "checkpoint:PATH" in " ".join(res.output.split())  # rich wraps lines
