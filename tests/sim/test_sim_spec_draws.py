"""Speculative acceptance draws by threshold comparison (``sim/spec_draws.py``) give the count of
the formula ``min(int(log(1 - u) / log(alpha)) + 1, kmax)`` for every uniform: at, beside and
around every threshold, and on random uniforms, for acceptance rates from 0.02 to 1 - 1e-12."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferencegym.sim.spec_draws import (
    DELTA_U,
    draw_table,
    formula_draw,
    table_draw,
    tenant_draws,
    thresholds,
)

ALPHAS = (0.02, 0.1, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99, 0.999, 0.3333333333333333)


def _inline(u: float, entry: tuple) -> int:
    """The hot loops' inlined form (spec_step / spec_ahead) of one draw."""
    j, a1, b1, a2, b2, a3, tb = entry
    if j:
        return j
    if u < a1:
        return 1
    if b1 <= u < a2:
        return 2
    if b2 <= u < a3:
        return 3
    return table_draw(u, tb)


def _probe_points(ts: list[float]) -> list[float]:
    pts = [0.0, 5e-324, 1e-300, 0.5, math.nextafter(1.0, 0.0)]
    for t in ts:
        if t == math.inf:
            continue
        for c in (t, t - DELTA_U, t + DELTA_U):
            x = c
            for _ in range(4):
                x = math.nextafter(x, 0.0)
            for _ in range(9):  # c and four doubles either side
                if 0.0 <= x < 1.0:
                    pts.append(x)
                x = math.nextafter(x, 1.0)
    return pts


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("kmax", [2, 3, 4, 9])
def test_table_draw_is_the_formula_at_every_threshold_and_on_random_uniforms(alpha, kmax):
    lg = math.log(alpha)
    ts = thresholds(lg, kmax - 1)
    # each threshold is where the formula steps: below it fewer accepted, at it at least m + 1
    for m, t in enumerate(ts, start=1):
        if t == math.inf:
            assert formula_draw(math.nextafter(1.0, 0.0), lg, kmax) <= m
            continue
        assert formula_draw(t, lg, kmax) >= m + 1
        assert formula_draw(math.nextafter(t, 0.0), lg, kmax) <= m
    lat, _ = tenant_draws([alpha], alpha, kmax)
    us = _probe_points(ts) + np.random.default_rng(int(alpha * 1e6) + kmax).random(20_000).tolist()
    for u in us:
        want = formula_draw(u, lg, kmax)
        assert _inline(u, lat[0]) == want, (alpha, kmax, u.hex())


def test_alpha_near_one_falls_back_to_the_formula():
    alpha = 1.0 - 1e-12  # thresholds ~1e-12 apart: the zones touch, no table
    lg = math.log(alpha)
    assert draw_table(lg, 4) is None
    lat, _ = tenant_draws([alpha], alpha, 4)
    for u in [0.0, 1e-13, 2e-12, 0.5, 0.999] + np.random.default_rng(0).random(2000).tolist():
        assert _inline(u, lat[0]) == formula_draw(u, lg, 4)


def test_tenant_entries_fixed_counts_default_and_memo():
    lat, ldef = tenant_draws([0.0, 1.0, None, 0.7], 0.6, 3)
    assert [e[0] for e in lat[:2]] == [1, 3]  # alpha 0: the target token only; alpha 1: all drafts
    assert lat[2] == ldef and ldef[0] == 0 and ldef[-1][6] == math.log(0.6)  # None: the default
    assert lat[3][-1][6] == math.log(0.7)
    assert tenant_draws([0.0, 1.0, None, 0.7], 0.6, 3) is tenant_draws([0.0, 1.0, None, 0.7], 0.6, 3)


def test_thresholds_refuse_a_non_negative_log():
    with pytest.raises(ValueError, match="lg must be log"):
        thresholds(0.0, 2)
