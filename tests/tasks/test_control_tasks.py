"""Control-plane tasks (issue 22 items 2, 4 and 5): the ServeGen day curve, the day split, admission
tiers, and the published effects of the production autoscalers on the same curve."""

import dataclasses

import numpy as np
import pytest

from inferencegym.evaluation.control import parse_spec, run_episode
from inferencegym.tasks.control import (arrivals, day_rates, day_split, get_control_task, grade,
                                        load_windows)


@pytest.fixture(scope="module")
def windows_path(reference_dir):
    return str(reference_dir / "traces" / "servegen" / "language__m-large__windows.parquet")


def test_servegen_windows_give_14_days_split_by_day(windows_path):
    w = load_windows(windows_path)
    assert w.shape == (14, 144) and (w > 0).all()
    sp = day_split(len(w))
    assert sp == {"train": list(range(10)), "validation": [10, 11], "test": [12, 13]}
    task = get_control_task("cluster_autoscaling")
    r = day_rates(task, w, 12)
    assert r.max() <= task.peak_rps() + 1e-9 and r.min() > 0
    assert day_split(1) == {"train": [0], "validation": [0], "test": [0]}


def test_bad_windows_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_text("not parquet")
    with pytest.raises(ValueError, match="not a ServeGen windows Parquet"):
        load_windows(str(bad))
    with pytest.raises(ValueError, match="file not found"):
        load_windows(str(tmp_path / "missing.parquet"))
    with pytest.raises(ValueError, match="bad control policy"):
        parse_spec("hpa+nope", get_control_task("cluster_autoscaling"))


def test_arrivals_follow_the_day_curve_and_are_deterministic(windows_path):
    task = get_control_task("cluster_autoscaling")
    r = day_rates(task, load_windows(windows_path), 12)
    a = arrivals(task, r, np.random.default_rng(7))
    b = arrivals(task, r, np.random.default_rng(7))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    per_window = np.bincount((a["arrival_s"] // task.window_s).astype(int), minlength=144)[:144] / task.window_s
    busy, calm = np.argsort(r)[-20:], np.argsort(r)[:20]
    assert per_window[busy].mean() > 1.5 * per_window[calm].mean()
    assert abs(len(a["arrival_s"]) / (r.sum() * task.window_s) - 1) < 0.15  # bursts add a little


def test_grade_weighs_slo_against_gpu_hours():
    task = get_control_task("cluster_autoscaling")
    full = task.max_replicas * task.tensor_parallel * 6.0
    s = {"slo_attainment": 1.0, "gpu_hours": full, "episode_s": 6 * 3600.0}
    assert grade(task, s) == pytest.approx(0.7)
    assert grade(task, {**s, "gpu_hours": full / 2}) == pytest.approx(0.85)
    adm = get_control_task("cluster_admission")
    assert grade(adm, {"tier_slo_attainment": {"critical": 1.0, "standard": 0.5, "sheddable": 0.0}}) \
        == pytest.approx(0.6 + 0.15)


def _slice(task_id, **kw):
    return dataclasses.replace(get_control_task(task_id), **kw)


def test_gaie_shedding_counts_rejections_against_sheddable_and_protects_critical(windows_path):
    task = _slice("cluster_admission", episode_s=900.0)
    base = run_episode(task, "admit_all", day=12, seed=3, load_windows_path=windows_path)
    shed = run_episode(task, "gaie_shed", day=12, seed=3, load_windows_path=windows_path)
    assert base["rejected"] == 0 and shed["tier_rejected"]["sheddable"] > 0
    assert shed["tier_rejected"]["critical"] == 0 and shed["tier_rejected"]["standard"] == 0
    assert shed["tier_ttft_p90_s"]["critical"] < base["tier_ttft_p90_s"]["critical"]
    n_shed = shed["arrivals"] * 0.3
    assert shed["tier_slo_attainment"]["sheddable"] <= 1 - shed["tier_rejected"]["sheddable"] / (1.3 * n_shed)


@pytest.fixture(scope="module")
def morning_ramp(windows_path):
    """Two hours (48 windows) of test day 12 from 06:40, seed 1: the same curve for every controller."""
    task = _slice("cluster_autoscaling", episode_s=7200.0, start_window=40)
    return {p: run_episode(task, p, day=12, seed=1, load_windows_path=windows_path) for p in ("hpa", "kpa", "wva")}


def test_hpa_with_its_300s_scale_down_window_costs_more_gpu_hours_than_kpa(morning_ramp):
    assert morning_ramp["hpa"]["gpu_hours"] > 1.5 * morning_ramp["kpa"]["gpu_hours"]


def test_wva_has_fewer_slo_failures_than_hpa_at_lower_cost(morning_ramp):
    hpa, wva = morning_ramp["hpa"], morning_ramp["wva"]
    assert wva["gpu_hours"] <= hpa["gpu_hours"]
    assert 1 - wva["slo_attainment"] < 1 - hpa["slo_attainment"]


def test_evaluate_json_rows_carry_the_control_metrics(windows_path):
    import json

    from typer.testing import CliRunner

    from inferencegym.cli import app

    res = CliRunner().invoke(app, ["evaluate", "--task", "cluster_admission", "--policy", "gaie_shed,admit_all",
                                   "-n", "1", "--episode-windows", "2", "--json", "--load-windows", windows_path])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["policy"] for r in rows] == ["gaie_shed", "admit_all"]
    for r in rows:
        assert {"gpu_hours", "slo_attainment", "tier_slo_attainment", "tier_ttft_p90_s"} <= set(r)
        assert set(r["tier_slo_attainment"]) == {"critical", "standard", "sheddable"}
    bad = CliRunner().invoke(app, ["evaluate", "--task", "cluster_autoscaling", "--policy", "hpa3"])
    assert bad.exit_code != 0 and "bad control policy" in bad.output


def test_failures_crash_replicas_and_every_request_is_still_accounted(windows_path):
    task = _slice("cluster_autoscaling", episode_s=1800.0, start_window=60)
    from inferencegym.tasks.control import lifecycle_config

    task_fail = dataclasses.replace(task)
    lc = lifecycle_config(task_fail, True)
    assert lc.mtbf_s == 4 * 3600.0 and lc.straggler_interval_s == 2 * 3600.0
    out = run_episode(task, "scheduled", day=12, seed=5, load_windows_path=windows_path, failures=True)
    calm = run_episode(task, "scheduled", day=12, seed=5, load_windows_path=windows_path, failures=False)
    assert calm["crashes"] == 0 and out["arrivals"] == calm["arrivals"]
    assert out["crashes"] >= 1 and out["retried"] >= 1


def test_control_env_return_is_the_grade_minus_the_cost_weight(windows_path):
    from gymnasium.utils.env_checker import check_env

    from inferencegym.envs.control_env import OBS_NAMES, ControlEnv

    env = ControlEnv(load_windows_path=windows_path, episode_windows_override=2)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=4)
    assert obs.shape == (len(OBS_NAMES),) and info["day"] in range(10)  # a training day
    ret, done = 0.0, False
    while not done:
        obs, r, done, trunc, step_info = env.step(6)
        ret += r
    assert env.fleet.lifecycle.target == 6
    assert ret + env.task.grade_cost_weight == pytest.approx(step_info["score"], abs=1e-9)
