"""``simulate``'s options are checked in plain Python when every value already has its type and
range, and by the pydantic model otherwise: the two give the same options and the same errors."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from inferencegym.cli import validation as V
from inferencegym.cli.simulate import DEFAULTS


def _pydantic_only(opts: dict) -> dict:
    """The reference: every input through the pydantic model (what validation did before)."""
    from pydantic import ValidationError

    model = V.simulate_options_model()
    try:
        checked = model.model_validate(opts)
    except ValidationError as exc:
        raise V.OptionError("; ".join(V._describe(e) for e in exc.errors()[:5])) from None
    out = dict(opts)
    out.update(checked.model_dump(exclude_unset=False, include=set(model.model_fields)))
    if not out.get("trace"):
        dur = out["duration_s"] or 300.0
        if out["rate"] * dur > V.MAX_SIM_REQUESTS:
            raise V.OptionError("too many")
    return out


def _outcome(fn, opts):
    try:
        out = fn(dict(opts))
    except V.OptionError as exc:
        return ("error", str(exc) if "too many" not in str(exc) and "requests; at most" not in str(exc) else "n")
    return ("ok", [(k, type(v).__name__, v) for k, v in out.items()])


_ODD = [None, True, False, 0, 1, -1, 2, 7, 65_536, 65_537, 2**63, 0.0, -0.0, 0.5, 1.0, 1.5, 2.0, 1e9,
        float("nan"), float("inf"), "3", "2.5", "", "x" * 200, "vllm", [1, 2], {"a": 1}, 10**7]


def test_the_plain_check_agrees_with_the_pydantic_model_on_random_options():
    rng = random.Random(24)
    base = dict(DEFAULTS)
    base["_spec_acceptance_given"] = False
    cases = [dict(base)]
    for _ in range(3000):
        o = dict(base)
        for k in rng.sample(sorted(V.SIMULATE_RULES), rng.randint(1, 3)):
            o[k] = rng.choice(_ODD)
        if rng.random() < 0.05:
            del o[rng.choice(sorted(V.SIMULATE_RULES))]
        cases.append(o)
    fast_taken = 0
    for o in cases:
        want = _outcome(_pydantic_only, o)
        got = _outcome(V.validate_simulate_options, o)
        assert got == want, o
        fast_taken += all(k in o and r.accepts(o[k]) for k, r in V.SIMULATE_RULES.items())
    assert fast_taken > 100  # both paths were exercised
    assert fast_taken < len(cases) - 1000


@pytest.mark.parametrize("k,v,ok", [("rate", 2, True), ("rate", True, False), ("replicas", 2.0, False),
                                    ("duration_s", None, True), ("rate", None, False),
                                    ("model", "", False), ("batch_cap", 65_536, True),
                                    ("kv_budget_fraction", 0.0, False), ("seed", 2**63, False)])
def test_a_rule_accepts_only_values_the_model_returns_unchanged(k, v, ok):
    assert V.SIMULATE_RULES[k].accepts(v) is ok


def test_a_simulate_run_with_valid_flags_builds_no_model_and_imports_no_generators_or_click():
    # (pydantic itself is imported by typer >= 0.29, which coerces every option through it)
    code = ("import sys\nsys.argv = ['inferencegym', 'simulate', '--rate', '2', '--duration-s', '5', '--json']\n"
            "from inferencegym.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "from inferencegym.cli import validation\n"
            "print(validation._MODEL is None, sorted(m for m in ('click', 'inferencegym.workload.fit', "
            "'inferencegym.workload.prefix_gen', 'inferencegym.workload.stats') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "True []"


def test_a_bad_value_still_fails_with_pydantic_s_message():
    o = dict(DEFAULTS)
    o["replicas"] = 0
    with pytest.raises(V.OptionError, match=r"replicas: Input should be greater than or equal to 1 \(given 0\)"):
        V.validate_simulate_options(o)
