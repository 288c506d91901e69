"""Arrival processes and length samplers: the statistics they promise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferencegym.workload.arrival_registry import Diurnal, arrival_from_dict
from inferencegym.workload.arrivals import (EmpiricalRate, GammaRenewal, OnOffMMPP, Poisson,
                                            WeibullRenewal, fit_renewal)
from inferencegym.workload.arrivals_markov import fit_markov_bins
from inferencegym.workload.lengths import (CopulaLengths, EmpiricalLengths, LognormalLengths, ZipfLengths,
                                           fit_copula_lengths, fit_parametric_lengths, lengths_from_dict)


def _cv(a):
    d = np.diff(a)
    return d.std() / d.mean()


@pytest.mark.parametrize("proc,cv", [
    (Poisson(rate_per_s=20.0), 1.0),
    (GammaRenewal(rate_per_s=20.0, cv=3.0), 3.0),
    (GammaRenewal(rate_per_s=20.0, cv=0.5), 0.5),
    (WeibullRenewal(rate_per_s=20.0, shape=0.5), math.sqrt(math.gamma(5) / math.gamma(3) ** 2 - 1)),
])
def test_renewal_rate_and_cv(proc, cv):
    a = proc.sample(5000.0, np.random.default_rng(0))
    assert np.all(np.diff(a) >= 0) and a[0] >= 0 and a[-1] < 5000.0
    assert a.size / 5000.0 == pytest.approx(20.0, rel=0.05)
    assert _cv(a) == pytest.approx(cv, rel=0.1)
    assert arrival_from_dict(proc.to_dict()) == proc


def test_onoff_and_empirical_rate():
    p = OnOffMMPP(rate_on_per_s=50.0, rate_off_per_s=1.0, mean_on_s=5.0, mean_off_s=20.0)
    a = p.sample(20000.0, np.random.default_rng(1))
    assert a.size / 20000.0 == pytest.approx(p.rate_per_s, rel=0.1)
    assert _cv(a) > 2  # bursty
    e = EmpiricalRate(bin_s=10.0, counts=(0.0, 100.0, 10.0))
    b = e.sample(3000.0, np.random.default_rng(2))
    c = np.bincount((b // 10).astype(int) % 3, minlength=3) / 100
    assert c[0] == 0 and c[1] == pytest.approx(100, rel=0.05) and c[2] == pytest.approx(10, rel=0.15)


def test_diurnal_peak_and_trough():
    d = Diurnal(base={"kind": "poisson", "rate_per_s": 2.0}, amplitude=0.6, period_s=86400.0, peak_s=43200.0)
    a = d.sample(86400.0, np.random.default_rng(3))
    assert a.size / 86400 == pytest.approx(2.0, rel=0.03)
    hours = np.bincount((a // 3600).astype(int), minlength=24)
    assert hours[11:13].mean() / hours[[0, 23]].mean() == pytest.approx(1.6 / 0.4, rel=0.15)
    assert np.all(np.diff(a) >= 0)


def test_markov_bins_fit_recovers_onoff_structure():
    truth = OnOffMMPP(rate_on_per_s=30.0, rate_off_per_s=0.0, mean_on_s=30.0, mean_off_s=90.0)
    a = truth.sample(7200.0, np.random.default_rng(4))
    m = fit_markov_bins(a)
    assert m.rate_per_s == pytest.approx(a.size / (a[-1] - a[0]))
    g = m.sample(7200.0, np.random.default_rng(5))
    assert g.size / 7200 == pytest.approx(m.rate_per_s, rel=0.05)
    assert _cv(g) == pytest.approx(_cv(a), rel=0.25)
    # empty share of 10-s bins carried over
    from inferencegym.workload.stats import bin_counts
    assert np.mean(bin_counts(g) == 0) == pytest.approx(np.mean(bin_counts(a) == 0), abs=0.1)
    assert arrival_from_dict(m.to_dict()) == m


def test_fit_renewal_picks_the_true_law():
    a = WeibullRenewal(rate_per_s=5.0, shape=0.5).sample(4000.0, np.random.default_rng(6))
    f = fit_renewal(a)
    assert f["best_by_ks"] == "weibull" and f["weibull"]["shape"] == pytest.approx(0.5, rel=0.05)
    g = GammaRenewal(rate_per_s=5.0, cv=2.0).sample(4000.0, np.random.default_rng(7))
    assert fit_renewal(g)["gamma"]["cv"] == pytest.approx(2.0, rel=0.1)


def test_bad_process_params():
    with pytest.raises(ValueError, match="rate_per_s must be > 0"):
        Poisson(rate_per_s=0)
    with pytest.raises(ValueError, match="unknown arrival process 'x'; valid: diurnal, empirical_rate"):
        arrival_from_dict({"kind": "x"})
    with pytest.raises(ValueError, match="bad parameters for arrival process 'poisson'"):
        arrival_from_dict({"kind": "poisson", "rate": 1})
    with pytest.raises(ValueError, match="duration_s"):
        Poisson(rate_per_s=1.0).sample(-1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="amplitude"):
        Diurnal(base={"kind": "poisson", "rate_per_s": 1.0}, amplitude=1.5)


def test_copula_reproduces_marginals_and_rank_correlation():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(8)
    z = rng.multivariate_normal([0, 0], [[1, 0.6], [0.6, 1]], 20000)
    p = np.rint(np.exp(6 + 0.8 * z[:, 0])).astype(int) + 1
    o = np.rint(np.exp(4 + 1.0 * z[:, 1])).astype(int) + 1
    c = fit_copula_lengths(p, o)
    gp, go = c.sample(20000, np.random.default_rng(9))
    for x, y in ((p, gp), (o, go)):
        for q in (50, 90, 99):
            assert np.percentile(y, q) == pytest.approx(np.percentile(x, q), rel=0.05)
    assert spearmanr(gp, go).statistic == pytest.approx(spearmanr(p, o).statistic, abs=0.03)
    assert gp.min() >= p.min() and gp.max() <= p.max()  # clipped to the observed range
    assert lengths_from_dict(c.to_dict()) == c


def test_parametric_and_empirical_lengths():
    rng = np.random.default_rng(10)
    p = np.rint(np.exp(rng.normal(6, 1, 5000))).astype(int) + 1
    o = np.rint(np.exp(rng.normal(4, 0.5, 5000))).astype(int) + 1
    f = fit_parametric_lengths(p, o)
    ln = lengths_from_dict({k: v for k, v in f["lognormal"].items() if not k.startswith("ks")})
    assert ln.prompt_mu == pytest.approx(6, abs=0.05) and ln.output_sigma == pytest.approx(0.5, abs=0.05)
    assert f["lognormal"]["ks_prompt"] < f["zipf"]["ks_prompt"]
    z = ZipfLengths(prompt_a=1.5, output_mu=4, output_sigma=0.5, max_tokens=(1000, 1000))
    zp, _ = z.sample(1000, np.random.default_rng(0))
    assert zp.max() <= 1000 and zp.min() >= 1
    e = EmpiricalLengths(np.array([1, 2, 3]), np.array([10, 20, 30]))
    ep, eo = e.sample(100, np.random.default_rng(0))
    assert np.all(eo == ep * 10)
    with pytest.raises(ValueError, match="unknown length sampler"):
        lengths_from_dict({"kind": "uniformish"})
    with pytest.raises(ValueError, match="rho"):
        CopulaLengths(levels=(0, 1), prompt_quantiles=(1, 2), output_quantiles=(1, 2), rho=1.0)
    LognormalLengths(prompt_mu=1, prompt_sigma=1, output_mu=1, output_sigma=1)


def test_markov_bins_learns_hour_of_day_on_multi_day_traces():
    truth = Diurnal(base={"kind": "poisson", "rate_per_s": 0.5}, amplitude=0.7, period_s=86400.0,
                    peak_s=15 * 3600.0)
    a = truth.sample(3 * 86400.0, np.random.default_rng(11))
    m = fit_markov_bins(a)
    assert m.hour_of_day is not None and np.argmax(m.hour_of_day) in (14, 15, 16)
    g = m.sample(86400.0, np.random.default_rng(12))
    hours = np.bincount((g // 3600).astype(int), minlength=24)
    assert hours[14:17].mean() / hours[[2, 3, 4]].mean() > 3  # true ratio (1.7/0.3 at the extremes)
    assert g.size / 86400 == pytest.approx(a.size / (a[-1] - a[0]), rel=0.05)
