"""The host link constants of the CPU KV tier are the fit of the committed H100 measurement."""

from __future__ import annotations

import json

import pytest

from inferencegym.sim.cpu_kv import OFFLOAD_COPY_S
from inferencegym.sim.presets import H100_HOST_LINK_GB_S, H200_HOST_LINK_GB_S


def test_the_constants_are_the_fit_of_the_committed_measurement(bench_module):
    mod = bench_module("host_link_fit")
    res = mod.fit(json.loads(mod.DEFAULT.read_text()))
    assert "H100" in res["device"]
    assert abs(res["h2d"]["link_gb_s"] / H100_HOST_LINK_GB_S - 1) < 0.005
    assert abs(res["h2d"]["copy_s"] / OFFLOAD_COPY_S - 1) < 0.01
    assert res["h2d"]["max_rel_err"] < 0.05  # the two-term model holds on every block size
    assert res["both_gb_s"] > 1.5 * res["h2d"]["link_gb_s"]  # the link is full duplex


def test_a_measurement_without_the_rows_a_figure_needs_is_refused(bench_module):
    mod = bench_module("host_link_fit")
    with pytest.raises(ValueError, match="16 MiB"):
        mod.fit({"rows": [{"kind": "contiguous", "dir": "h2d", "bytes_each": 4096, "gpu_s": 1e-5, "count": 1}]})


def test_the_h200_figure_is_the_fit_of_its_own_measurement(bench_module):
    mod = bench_module("host_link_fit")
    res = mod.fit(json.loads((mod.DEFAULT.parents[1] / "gpu_h200_2026-11-26" / "host_link.json").read_text()))
    assert "H200" in res["device"]
    assert abs(res["h2d"]["link_gb_s"] / H200_HOST_LINK_GB_S - 1) < 0.005
    assert abs(res["h2d"]["copy_s"] / OFFLOAD_COPY_S - 1) < 0.15  # one per-copy constant for both hosts
