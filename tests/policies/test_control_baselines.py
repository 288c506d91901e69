"""Autoscaler and admission baselines (issue 22 items 2-3): each documented rule, on hand-made
observations, and the gateway's tiers."""

import numpy as np
import pytest

from inferencegym.policies.admission import GaieShed, TokenBucket, make_admission
from inferencegym.policies.autoscalers import (HPA, KPA, WVA, ControlContext, DynamoPlanner, Hindsight,
                                               Scheduled, _dp_schedule, make_autoscaler)
from inferencegym.sim.fleet import ControlObs
from inferencegym.sim.gateway import ADMIT, DEFER, REJECT, GatewayState

CTX = ControlContext(capacity_rps=3.5, concurrency_at_capacity=70.0, max_replicas=12, interval_s=15.0,
                     startup_s=70.0, window_s=150.0, profile_rps=tuple([7.0] * 144))


def obs(now=0.0, ready=4, starting=0, target=4, queue=None, kv=None, running=None, hist=None):
    queue = [0] * ready if queue is None else queue
    return ControlObs(now_s=now, ready=ready, starting=starting, draining=0, target=target, queue=queue,
                      running=running or [10] * ready, kv=kv or [0.2] * ready, held=0,
                      history=hist or {"t": [], "ready": [], "running": [], "waiting": [], "arrivals": []},
                      tick_s=1.0)


def test_hpa_scales_up_on_waiting_and_holds_the_peak_for_its_300s_window():
    h = HPA()
    h.reset(CTX)
    assert h.act(obs(queue=[20, 20, 20, 20])) == 8 + 0  # 4 * (20/5) = 16, limited to max(2x, +4) = 8
    assert h.act(obs(now=15, target=8, ready=8, queue=[5] * 8)) == 8  # within tolerance
    assert h.act(obs(now=30, target=8, ready=8, queue=[0] * 8)) == 8  # stabilization: 8 recommended < 300 s ago
    assert h.act(obs(now=400, target=8, ready=8, queue=[0] * 8)) == 1  # the window has passed: down to min


def test_kpa_panics_on_a_burst_and_never_scales_down_while_panicking():
    k = KPA()
    k.reset(CTX)
    target = 0.7 * 70
    calm = {"running": [4 * target] * 54, "waiting": [0] * 54, "arrivals": [], "t": [], "ready": []}
    assert k.act(obs(hist=calm)) == 4
    burst = {**calm, "running": calm["running"] + [10 * target] * 6, "waiting": calm["waiting"] + [0] * 6}
    assert k.act(obs(now=60, hist=burst)) == 10  # panic window average: 10 replicas' worth, >= 2x ready
    drop = {**burst, "running": burst["running"] + [target] * 6, "waiting": burst["waiting"] + [0] * 6}
    assert k.act(obs(now=70, target=10, hist=drop)) == 10  # still panicking: no scale-down


def test_wva_saturation_rules():
    w = WVA()
    w.reset(CTX)
    assert w.recommend(obs(queue=[3, 3, 3, 3])) == 5              # spare queue 2 < 3: scale up
    assert w.recommend(obs(queue=[3, 3, 3, 3], starting=1)) == 4  # blocked while a replica is pending
    assert w.recommend(obs(kv=[0.75] * 4)) == 5                   # spare KV 0.05 < 0.10
    assert w.recommend(obs(queue=[0, 0, 0, 0])) == 3              # one fewer still leaves spare capacity
    assert w.recommend(obs(queue=[1, 1, 2, 1])) == 3              # 5 waiting over 3 replicas: spare 3.33 >= 3
    assert w.recommend(obs(queue=[2, 2, 2, 1])) == 4        # 7/3 = 2.33 -> spare 2.67 < 3: hold
    w.reset(CTX)  # actuated through HPA: scale-up at once, scale-down only after 300 s
    assert w.act(obs(queue=[3, 3, 3, 3])) == 5
    assert w.act(obs(now=15, target=5, ready=5, queue=[0] * 5)) == 5
    assert w.act(obs(now=330, target=5, ready=5, queue=[0] * 5)) == 4


def test_dynamo_planner_provisions_for_the_predicted_rate():
    d = DynamoPlanner(adjustment_interval_s=10.0)
    d.reset(CTX)
    hist = {"arrivals": [35] * 10, "t": [], "ready": [], "running": [], "waiting": []}  # 35 req/s
    assert d.act(obs(hist=hist)) == 10
    assert d.act(obs(now=5, hist={**hist, "arrivals": [0] * 10})) == 10  # holds between adjustments


def test_scheduled_follows_the_training_profile():
    s = Scheduled()
    s.reset(CTX)
    assert s.act(obs()) == int(np.ceil(7.0 * 1.1 / 3.5))


def test_hindsight_dp_keeps_replicas_through_short_dips_and_leads_by_startup():
    need = np.array([2, 2, 6, 1, 6, 2, 2])
    plan = _dp_schedule(need, 12, up_cost=5.0)
    assert list(plan) == [2, 2, 6, 6, 6, 2, 2]  # a one-interval dip is cheaper to ride out
    assert all(plan >= need)
    ctx = ControlContext(**{**CTX.__dict__, "future_arrivals_s": np.sort(np.r_[np.linspace(0, 299, 300),
                                                                             np.linspace(300, 330, 1000)])})
    h = Hindsight()
    h.reset(ctx)
    assert h.act(obs(now=240.0)) > 4  # the burst at 300 s is requested a start-up delay ahead
    with pytest.raises(ValueError, match="privileged"):
        Hindsight().reset(CTX)


def test_unknown_names_are_one_clear_error():
    with pytest.raises(ValueError, match="valid: hpa, kpa, wva"):
        make_autoscaler("hpa2")
    with pytest.raises(ValueError, match="valid: admit_all, gaie_shed, token_bucket"):
        make_admission("drop")


def test_gaie_sheds_only_sheddable_and_only_when_the_pool_is_saturated():
    g = GaieShed()
    calm = GatewayState(routable=2, queue=[1, 2], kv=[0.3, 0.4])
    hot = GatewayState(routable=2, queue=[6, 9], kv=[0.5, 0.9])
    assert [g.decide(t, 0.0, calm) for t in (0, 1, 2)] == [ADMIT, ADMIT, ADMIT]
    assert [g.decide(t, 0.0, hot) for t in (0, 1, 2)] == [ADMIT, ADMIT, REJECT]
    assert GatewayState(routable=0).saturation() == float("inf")


def test_token_bucket_defers_standard_rejects_sheddable_passes_critical():
    tb = TokenBucket(burst_s=1.0)
    tb.reset(capacity_rps=2.0)
    st = GatewayState(routable=1, queue=[0], kv=[0.0])
    assert tb.decide(1, 1.0, st) == ADMIT       # 2 tokens after 1 s at 2/s
    assert tb.decide(1, 1.0, st) == ADMIT
    assert tb.decide(1, 1.0, st) == DEFER       # empty: standard waits
    assert tb.decide(2, 1.0, st) == REJECT      # sheddable dropped
    assert tb.decide(0, 1.0, st) == ADMIT       # critical always passes
