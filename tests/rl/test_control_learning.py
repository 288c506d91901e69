"""Learned control-plane agents (issue 22 item 6): the training env and the evaluation see the same
features, the DAgger teacher round is the ceiling itself, the level admission spreads shares
evenly, and the shipped ``pretrained:cluster_autoscaling`` / ``pretrained:cluster_admission``
load, evaluate and serve (in-process) the same actions."""

import dataclasses

import numpy as np
import pytest

import inferencegym.rl  # noqa: F401  (registers the pretrained: / checkpoint: control handlers)
from inferencegym.envs.control_env import ControlEnv
from inferencegym.envs.control_features import HISTORY_NAMES, feature_names
from inferencegym.evaluation.control import evaluate_control, parse_spec, run_episode
from inferencegym.policies.admission import ADMISSION_LEVELS, LevelAdmission
from inferencegym.rl.control import LearnedAutoscaler, collect_autoscaler, load_control_policy
from inferencegym.sim.gateway import ADMIT, REJECT, GatewayState
from inferencegym.tasks.control import get_control_task


class Recorder:
    """A fixed-action policy that records what it was shown."""

    def __init__(self, action: int) -> None:
        self.action, self.seen = action, []

    def act(self, x):
        self.seen.append(np.array(x))
        return self.action


def short_task(windows: int = 2):
    t = get_control_task("cluster_autoscaling")
    return dataclasses.replace(t, episode_s=windows * t.window_s)


def test_training_env_and_evaluation_see_the_same_history_features():
    env = ControlEnv(features="history", episode_windows_override=2)
    obs, info = env.reset(seed=3)
    assert obs.shape == (len(feature_names("history")),) and len(HISTORY_NAMES) == 11
    seen_env, done = [obs], False
    while not done:
        obs, _, done, _, step_info = env.step(7)
        seen_env.append(obs)
    rec = LearnedAutoscaler(Recorder(7))
    out = run_episode(short_task(), "wva", day=info["day"], seed=info["seed"], autoscaler=rec)
    assert len(rec.policy.seen) == len(seen_env) - 1  # the env also returns the final observation
    assert np.array_equal(np.stack(rec.policy.seen), np.stack(seen_env[:-1]))
    assert out["score"] == pytest.approx(step_info["score"], abs=1e-12)


def test_dagger_teacher_round_is_the_hindsight_ceiling():
    env = ControlEnv(features="history", episode_windows_override=3)
    obs, acts, eps = collect_autoscaler(env, seeds=[5])
    ceiling = run_episode(short_task(3), "hindsight", day=eps[0]["day"], seed=5)
    assert eps[0]["score"] == pytest.approx(ceiling["score"], abs=1e-12)
    assert len(obs) == len(acts) == 3 * 150 // 15 and all(1 <= a <= 12 for a in acts)


class FixedLevel(LevelAdmission):
    def __init__(self, level: int) -> None:
        self.lvl = level

    def level_at(self, state):
        return self.lvl


@pytest.mark.parametrize("level", range(len(ADMISSION_LEVELS)))
def test_level_admission_admits_its_share_of_each_tier_evenly(level):
    adm = FixedLevel(level)
    adm.reset(3.5)
    st = GatewayState(now_s=1.0, routable=6)
    got = {t: [adm.decide(t, 1.0, st) for _ in range(40)] for t in (0, 1, 2)}
    assert all(d == ADMIT for d in got[0])  # critical always
    for tier in (1, 2):
        share = ADMISSION_LEVELS[level][tier - 1]
        admitted = sum(d == ADMIT for d in got[tier])
        assert abs(admitted - share * 40) <= 1 and all(d in (ADMIT, REJECT) for d in got[tier])
        if share == 0.5:  # evenly spread: never two admissions in a row
            assert all(not (a == b == ADMIT) for a, b in zip(got[tier], got[tier][1:]))


def test_learned_specs_parse_by_task_role():
    auto, adm = get_control_task("cluster_autoscaling"), get_control_task("cluster_admission")
    assert parse_spec("pretrained:cluster_autoscaling", auto) == ("pretrained:cluster_autoscaling", "admit_all")
    assert parse_spec("pretrained:cluster_autoscaling+gaie_shed", auto)[1] == "gaie_shed"
    assert parse_spec("pretrained:cluster_admission", adm) == ("static", "pretrained:cluster_admission")
    with pytest.raises(ValueError, match="bad control policy"):
        parse_spec("pretrained:a+checkpoint:b", auto)
    with pytest.raises(ValueError, match="two admission controllers"):
        parse_spec("pretrained:cluster_admission+gaie_shed", adm)
    with pytest.raises(ValueError, match="no pretrained policy"):
        run_episode(short_task(), "pretrained:no_such_task", day=12, seed=1)


@pytest.mark.parametrize("task", ["cluster_autoscaling", "cluster_admission"])
def test_pretrained_control_policy_evaluates_and_serves_the_same_actions(task):
    from inferencegym.apps.policy_endpoint.policy import ServedPolicy

    ctl = load_control_policy(f"pretrained:{task}", task)
    served = ServedPolicy.from_spec(f"pretrained:{task}")
    n = served.observation_space.shape[0]
    assert served.metadata()["task_id"] == task and served.action_space.n == (
        13 if task == "cluster_autoscaling" else len(ADMISSION_LEVELS))
    x = np.random.default_rng(0).uniform(0, 1.5, size=(16, n)).astype(np.float32)
    assert served.act_batch(list(x)) == [ctl.policy.act(o) for o in x]
    kw = {"episode_windows": 2} if task == "cluster_autoscaling" else {}
    row = evaluate_control(f"pretrained:{task}", task, episodes=1, seed=1000, **kw)
    again = evaluate_control(f"pretrained:{task}", task, episodes=1, seed=1000, **kw)
    assert row["policy"] == f"pretrained:{task}" and 0.0 <= row["score_mean"] <= 1.0
    assert row["episodes_detail"] == again["episodes_detail"]  # deterministic


def test_the_schedule_features_hold_exactly_what_the_scheduled_rule_computes():
    from inferencegym.envs.control_features import SCHEDULE_NAMES
    from inferencegym.policies.autoscalers import make_autoscaler

    env = ControlEnv(split="validation", features="schedule", episode_windows_override=3)
    obs, _ = env.reset(seed=1)
    names = feature_names("schedule")
    assert names[-len(SCHEDULE_NAMES):] == SCHEDULE_NAMES and obs.shape == (len(names),)
    rule = make_autoscaler("scheduled")
    rule.reset(env.ctx)
    done, seen = False, set()
    while not done:
        a = rule.act(env.fleet.observe())
        assert obs[names.index("scheduled_target_frac")] * env.task.max_replicas == pytest.approx(a, abs=1e-5)
        seen.add(a)
        obs, _, done, _, _ = env.step(a)
    assert obs[names.index("level_need_frac")] >= 0.0


class ServedOverJSON:
    """What ``HTTPPolicy`` is to the evaluation: the endpoint's ``/metadata`` and, per step, a JSON
    observation decoded and checked against the served module's space (as ``POST /act`` does)."""

    def __init__(self, served) -> None:
        import json

        self.served = served
        self.metadata = json.loads(json.dumps(served.metadata()))
        self.calls = 0

    def act(self, x):
        self.calls += 1
        obs = self.served.decode([np.asarray(x).tolist()], batched=False)[0]  # ObservationError on a bad size
        return self.served.act(obs)


def test_a_served_autoscaler_is_fed_the_feature_set_it_was_trained_on():
    from inferencegym.apps.policy_endpoint.policy import ServedPolicy
    from inferencegym.envs.control_features import FEATURE_SETS, feature_set_of_size
    from inferencegym.rl.control import wrap_control_policy

    assert len({len(v) for v in FEATURE_SETS.values()}) == len(FEATURE_SETS)  # a size names one set
    with pytest.raises(ValueError, match="no autoscaler feature set has 7 values"):
        feature_set_of_size(7)
    served = ServedOverJSON(ServedPolicy.from_spec("pretrained:cluster_autoscaling"))
    local = load_control_policy("pretrained:cluster_autoscaling", "cluster_autoscaling")
    remote = wrap_control_policy(served, "cluster_autoscaling", name="http://test")
    assert remote.features == local.features  # inferred from the endpoint's observation size
    a = run_episode(short_task(2), "wva", day=12, seed=1000, autoscaler=remote)
    b = run_episode(short_task(2), "wva", day=12, seed=1000, autoscaler=local)
    assert served.calls == 2 * 150 // 15 and a["score"] == pytest.approx(b["score"], abs=1e-12)


def test_transfer_features_are_the_schedule_features_without_the_clock_plus_ratios():
    from inferencegym.envs.control_features import RELATIVE_NAMES, TRANSFER_CLIP

    names, sched = feature_names("transfer"), feature_names("schedule")
    assert "tod_sin" not in names and names[-len(RELATIVE_NAMES):] == RELATIVE_NAMES
    big = ControlEnv(split="validation", features="transfer", episode_windows_override=3)
    ref = ControlEnv(split="validation", features="schedule", episode_windows_override=3)
    small = ControlEnv(split="validation", features="transfer", episode_windows_override=3,
                       load_windows_path=str(get_windows("language__m-small")))
    x, _ = big.reset(seed=2)
    y, _ = ref.reset(seed=2)
    small.reset(seed=2)
    for _ in range(20):
        x, *_ = big.step(5)
        y, *_ = ref.step(5)
        z, *_ = small.step(5)
    common = [n for n in names if n in sched and n not in TRANSFER_CLIP]
    assert np.array_equal(x[[names.index(n) for n in common]], y[[sched.index(n) for n in common]])
    for n, hi in TRANSFER_CLIP.items():  # load readings bounded, equal below the bound
        assert x[names.index(n)] == pytest.approx(min(hi, y[sched.index(n)]), abs=1e-7)
    rel = x[-len(RELATIVE_NAMES):]
    assert np.all((rel >= 0) & (rel <= 4)) and np.all(np.isfinite(z))
    v = dict(zip(names, x))  # the level over the profile: the last window's rate / the profile now
    assert v["rate_window_vs_profile_now"] == pytest.approx(min(4.0, v["rate_window"] / v["profile_now"]), rel=1e-5)



def get_windows(name: str):
    """A ServeGen windows file beside the default one (missing: ``load_windows`` fails loudly)."""
    from pathlib import Path

    from inferencegym.tasks.control import DEFAULT_WINDOWS

    return Path(DEFAULT_WINDOWS).parent / f"{name}__windows.parquet"


def test_an_exported_directory_evaluates_as_a_checkpoint_spec():
    from inferencegym.rl.policy_loader import PRETRAINED_DIR

    spec = f"checkpoint:{PRETRAINED_DIR / 'cluster_autoscaling'}"
    a = evaluate_control(spec, "cluster_autoscaling", episodes=1, seed=1000, episode_windows=2)
    b = evaluate_control("pretrained:cluster_autoscaling", "cluster_autoscaling", episodes=1, seed=1000,
                         episode_windows=2)
    assert a["episodes_detail"] == b["episodes_detail"] and a["policy"] == spec
