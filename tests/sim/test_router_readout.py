"""What the cluster env's router decision reads from the simulator in one compiled call each
(``Cluster.first_tokens_since``, ``window_metrics.first_token_split`` / ``settled_split``):
they answer what the per-request loops they replace answered. The observations and rewards built
on them are pinned bit for bit by ``benchmarks/env_episode_hashes.py`` and the behaviour digest."""

from __future__ import annotations

import math

import numpy as np

from inferencegym.sim import Cluster, ClusterConfig
from inferencegym.sim.request import Request
from inferencegym.sim.window_metrics import first_token_split, settled_split


def _req(i: int, *, first: float = math.nan, done: float = math.nan, rejected: str | None = None) -> Request:
    r = Request(req_id=i, arrival_s=0.0, prompt_tokens=16, output_tokens=4)
    r.first_token_s = first
    r.completion_s = done
    r.rejected_reason = rejected
    return r


def test_splits_keep_the_order_and_drop_the_rejected():
    reqs = [_req(0, first=1.0), _req(1), _req(2, rejected="too long"), _req(3, first=2.0, done=5.0),
            _req(4, first=0.5, done=3.0), _req(5)]
    firsts, waiting = first_token_split(reqs)
    assert [r.req_id for r in firsts] == [0, 3, 4] and [r.req_id for r in waiting] == [1, 5]
    gone, keep, later = settled_split(reqs, 4.0)
    # completed by now (4) or rejected leave, in order; 3 completes at 5 (after now): kept, flagged
    assert [r.req_id for r in gone] == [2, 4] and [r.req_id for r in keep] == [0, 1, 3, 5] and later
    assert settled_split(reqs, 6.0)[2] is False


def test_first_tokens_since_sees_every_first_token_and_window_reset():
    cl = Cluster(ClusterConfig(num_replicas=2, router="round_robin"), np.random.default_rng(0))
    cl.submit([Request(req_id=i, arrival_s=0.01 * i, prompt_tokens=64, output_tokens=50) for i in range(6)])
    marks: list = []
    assert cl.first_tokens_since(marks) is True  # the first call
    assert cl.first_tokens_since(marks) is False
    seen = 0
    t = 0.0
    reset_at = None
    just_reset = False
    while t < 2.0:
        t += 0.002
        cl.run_until(t)
        firsts = sum(1 for r in cl.requests if r.first_token_s == r.first_token_s)
        # exact, except at the read just after a window reset: new lists count as a change
        assert cl.first_tokens_since(marks) is (firsts > seen or just_reset)
        seen = firsts
        just_reset = False
        if firsts >= 3 and reset_at is None:
            cl.window_stats(reset=True)  # new first-token lists; the marks hold the old ones
            reset_at = t
            just_reset = True
    assert seen == 6 and reset_at is not None
