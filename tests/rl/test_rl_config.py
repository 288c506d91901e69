"""Training-config validation: every shipped config loads; bad configs give clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inferencegym.rl.config import ConfigError, load_config, parse_config
from inferencegym.policies.routers import PRODUCTION_ROUTERS
from inferencegym.tasks import task_ids
from inferencegym.tasks.cluster import PREFIX_TASK_IDS

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "rllib_configs").glob("*.yaml"))
TASKS = set(task_ids())  # one shipped training config per registered task


def test_one_config_per_task_and_all_valid():
    cfgs = [load_config(p) for p in CONFIGS]
    assert {c.task_id for c in cfgs} == TASKS
    for c in cfgs:
        p = c.ppo
        assert p.use_kl_loss and p.kl_target > 0 and p.lambda_ == 0.95
        assert isinstance(p.lr, list) and p.lr[0][0] == 0  # schedules in RLlib's list form
        assert isinstance(p.entropy_coeff, list)
        assert p.minibatch_size <= p.train_batch_size_per_learner
        if c.env == "cluster":
            assert c.modules[c.map_agent("router")].type in ("attention_router", "mlp_router")
            assert c.map_agent("replica_17") == c.map_agent("replica_0")
            if c.task_id in PREFIX_TASK_IDS:  # issue 14: warm start from the best production router
                assert c.bc.enabled and c.bc.baseline in PRODUCTION_ROUTERS
                assert set(PRODUCTION_ROUTERS) & set(c.evaluation.baselines)


def _base() -> dict:
    return yaml.safe_load((Path(__file__).resolve().parents[2] / "rllib_configs" / "cluster_routing.yaml").read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["ppo"].update(lr=[[100, 1e-3], [200, 1e-4]]), "ppo.lr: .*must start at env step 0"),
    (lambda d: d["ppo"].update(entropy_coeff=[[0, 0.01], [0, 0.0]]), "steps must increase strictly"),
    (lambda d: d["ppo"].update(minibatch_size=4096), "minibatch_size 4096 is larger than"),
    (lambda d: d["ppo"].update(kl_target=0), r"ppo.kl_target: Input should be greater than 0 \(given: 0\)"),
    (lambda d: d["ppo"].update(lamda=0.9), "ppo.lamda: Extra inputs are not permitted"),
    (lambda d: d["modules"]["router_pol"].update(type="gpt"), "unknown module type 'gpt'; valid: affinity_router, attention_router"),
    (lambda d: d["policy_mapping"].update(router="nope"), r"policy_mapping uses modules \['nope'\]"),
    (lambda d: d.update(env="multi"), "env: Input should be 'single' or 'cluster'"),
    (lambda d: d["curriculum"].update(enabled=True, thresholds=[0.5]), "3 stages needs 2 thresholds"),
    (lambda d: d["resources"].update(num_env_runners=-1), "resources.num_env_runners"),
    (lambda d: d.pop("task_id"), "task_id: Field required"),
])
def test_bad_configs_are_rejected_with_location(mutate, message):
    data = _base()
    mutate(data)
    with pytest.raises(ConfigError, match=message) as exc:
        parse_config(data, "test.yaml")
    assert "invalid training config test.yaml" in str(exc.value)


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(lst)


def test_overrides_and_mapping():
    c = load_config(CONFIGS[0]).with_overrides(steps=1000, seed=7, iterations=1,
                                               sets=["ppo.minibatch_size=64", "curriculum.enabled=false"])
    assert (c.stop.timesteps_total, c.seed, c.stop.training_iteration, c.ppo.minibatch_size) == (1000, 7, 1, 64)
    with pytest.raises(ConfigError, match="expects key.path=value"):
        c.with_overrides(sets=["ppo.minibatch_size"])
    with pytest.raises(ConfigError, match="'nosuch' is not a section"):
        c.with_overrides(sets=["nosuch.x=1"])
    with pytest.raises(ConfigError, match="Extra inputs"):
        c.with_overrides(sets=["ppo.bogus=1"])
    cl = parse_config(_base())
    assert cl.map_agent("router") == "router_pol" and cl.map_agent("replica_3") == "replica_pol"
    with pytest.raises(ValueError, match="matches no policy_mapping entry"):
        cl.map_agent("scheduler")


def test_the_demo_config_trains_replica_agents_from_hold_knobs_with_a_critic_that_can_learn():
    from inferencegym.cli.demo import DEMO_CONFIGS, _config_path

    path = _config_path("cluster_prefix_sharing")
    assert path.parent.name == "demo" and DEMO_CONFIGS["cluster_prefix_sharing"] == "demo/cluster_prefix_sharing"
    c = load_config(path)
    assert c.task_id == "cluster_prefix_sharing" and c.env == "cluster"
    assert c.env_config.get("internal_router") == "estimated_ttft"          # the best observable router routes
    assert c.trainable == [c.map_agent("replica_0")]                         # only the replica agents learn
    assert c.modules[c.map_agent("replica_0")].type == "replica_sticky"      # warm start = hold_knobs, exactly
    assert c.modules[c.map_agent("router")].type == "est_ttft_router"
    assert "best_static_knobs" in c.evaluation.baselines
    # an untrained critic sees returns of ~35 per replica: a value-loss clip of 50 (squared) would
    # zero its gradient (issue 21, fifth session)
    assert c.ppo.vf_clip_param >= 1e4


def test_the_demo_trains_a_step_budget_so_its_verdict_does_not_depend_on_the_machine():
    """The replica agents improved with 10,800-12,000 env steps and did not move with the 4,320 a busy
    machine's minutes gave: the demo's default budget is env steps, with a wall-clock cap beside it."""
    from inferencegym.cli.demo import DEMO_MINUTES, DEMO_STEPS, _config_path

    steps, minutes = DEMO_STEPS["cluster_prefix_sharing"], DEMO_MINUTES["cluster_prefix_sharing"]
    assert steps >= 10_800 and minutes * 60 >= steps / 40 * 2      # the cap leaves 2x an idle machine's time
    c = load_config(_config_path("cluster_prefix_sharing")).with_overrides(
        steps=steps, sets=[f"stop.time_total_s={minutes * 60}"])
    assert c.stop.timesteps_total == steps and c.stop.time_total_s == minutes * 60
