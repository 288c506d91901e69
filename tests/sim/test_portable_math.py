"""Seeded results are the same on every x86 machine: the transcendental functions of arrays they pass
through are the C library's, applied elementwise (``inferencegym.sim.portable_math``), never numpy's
vector kernels (SVML on AVX-512 CPUs, which differ in the last bit for ~5 % of inputs and moved
``cluster_multiturn``'s recorded digest on such a machine)."""

from __future__ import annotations

import ast
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from inferencegym.sim import portable_math as pm

ROOT = Path(__file__).resolve().parents[2] / "inferencegym"

EDGES = [0.0, -0.0, 5e-324, 1e-300, -1e-300, 0.5, 1.0, -1.0, -2.0, 709.0, 710.0, -745.0, -746.0,
         1e308, -1e308, math.inf, -math.inf, math.nan]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values, nan where the other has nan, and the same sign of every zero and infinity."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
        return False
    num = ~np.isnan(a)
    return bool(np.all(np.signbit(a[num]) == np.signbit(b[num])))


@pytest.mark.parametrize("name, f1", [("exp", math.exp), ("log", math.log), ("log1p", math.log1p)])
def test_each_value_is_the_c_librarys(name, f1):
    rng = np.random.default_rng(7)
    x = rng.uniform(0.01, 30.0, 3000) * rng.choice([-1.0, 1.0], 3000)
    if name != "exp":
        x = np.abs(x)
    got = getattr(pm, name)(x)
    want = [f1(v) for v in x.tolist()]
    assert [v.hex() for v in got.tolist()] == [v.hex() for v in want]


def test_power_is_the_c_librarys():
    rng = np.random.default_rng(8)
    b, e = rng.uniform(0.0, 50.0, 3000), rng.uniform(-3.0, 3.0, 3000)
    assert [v.hex() for v in pm.power(b, e).tolist()] == [math.pow(x, y).hex() for x, y in zip(b.tolist(), e.tolist())]
    # a Zipf weight vector: an array to a scalar power (broadcast)
    w = pm.power(np.arange(1, 31, dtype=float), -1.1)
    assert w.shape == (30,) and w[0] == 1.0 and np.all(np.diff(w) < 0)


@pytest.mark.parametrize("name", ["exp", "log", "log1p"])
def test_special_values_are_numpys(name):
    x = np.asarray(EDGES)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = getattr(np, name)(x)
    got = getattr(pm, name)(x)
    special = ~np.isfinite(want) | (want == 0.0) | ~np.isfinite(x) | (x == 0.0)
    assert _same(got[special], want[special])
    assert np.allclose(got[~special], want[~special], rtol=4e-16, atol=0.0)


def test_power_special_values_are_numpys():
    b = np.asarray([0.0, -0.0, -0.0, 0.0, 10.0, -10.0, -10.0, 1e300, -1e300, math.inf, -math.inf, -2.0, 1.0, math.nan, 2.0])
    e = np.asarray([-1.0, -1.0, -2.0, 0.0, 400.0, 400.0, 401.0, 2.0, 3.0, 1.0, 3.0, 0.5, math.inf, 0.0, math.nan])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = np.power(b, e)
    assert _same(pm.power(b, e), want), (pm.power(b, e), want)


def test_shapes_are_kept():
    assert pm.exp(np.zeros((2, 3))).shape == (2, 3)
    assert pm.log(np.ones(0)).shape == (0,)
    assert pm.exp(0.0).shape == () and float(pm.exp(0.0)) == 1.0
    assert pm.power(np.full((2, 2), 2.0), np.asarray([1.0, 3.0])).tolist() == [[2.0, 8.0], [2.0, 8.0]]


_VECTOR_MATH = {"exp", "log", "log1p", "expm1", "power", "log2", "log10", "exp2", "tanh", "sinh",
                "cosh", "arctan", "arcsin", "arccos", "cbrt", "float_power"}

# Functions that fit parameters to traces (not seeded: the same trace gives the same fit on one
# machine, and the tests of fits use tolerances); offline GPU-profile calibration likewise.
_FITTING = {("workload/lengths.py", "_zipf_fit"), ("workload/lengths.py", "fit_parametric_lengths"),
            ("workload/stats.py", "trace_stats"), ("workload/prefix_fit.py", "_fit_popularity"),
            ("workload/prefix_stats.py", "zipf_exponent"), ("workload/prefix_stats.py", "nll")}


def _vector_math_calls(path: Path):
    tree = ast.parse(path.read_text())
    stack: list[str] = []

    class V(ast.NodeVisitor):
        def visit_FunctionDef(self, node):
            stack.append(node.name)
            self.generic_visit(node)
            stack.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Call(self, node):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in _VECTOR_MATH and isinstance(f.value, ast.Name)
                    and f.value.id in ("np", "numpy")):
                found.append((stack[-1] if stack else "<module>", f"np.{f.attr}", node.lineno))
            self.generic_visit(node)

    found: list[tuple[str, str, int]] = []
    V().visit(tree)
    return found


def test_no_seeded_code_calls_numpys_vector_transcendentals():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("sim/calibration/"):
            continue
        for fn, call, line in _vector_math_calls(path):
            if (rel, fn) not in _FITTING:
                bad.append(f"{rel}:{line} {call} in {fn}")
    assert not bad, ("numpy's vector transcendentals differ between CPUs (AVX-512 vs not); seeded code "
                     f"uses inferencegym.sim.portable_math instead (or add a trace-fitting function to _FITTING): {bad}")
