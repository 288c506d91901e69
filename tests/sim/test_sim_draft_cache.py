"""The draft pass's coefficients are memoised per batch size (``execution_spec``): after a warm
memo (batch sizes asked in any order) each answer is what a model that never saw another batch
size computes, for every proposer kind, with and without engine overhead."""

from __future__ import annotations

import random

import pytest

from inferencegym.sim.execution import ExecutionModel


def _model(draft, profile):
    return ExecutionModel.from_preset(model="llama-2-7b", gpu="a100-80gb", draft_model=draft,
                                      engine_profile=profile)


@pytest.mark.parametrize("draft", ["default", "eagle", "ngram"])
@pytest.mark.parametrize("profile", [None, "kernel-only"])
def test_draft_coefficients_memo_equals_a_fresh_computation(draft, profile):
    m = _model(draft, profile)
    sizes = list(range(1, 200))
    random.Random(0).shuffle(sizes)
    for b in sizes:  # warm the memo in a shuffled order
        m._draft_pass_coeffs(b)
    for b in (1, 2, 3, 17, 64, 199):
        fresh = _model(draft, profile)
        want = fresh._draft_pass_coeffs(b)  # its first and only entry: computed, not remembered
        assert list(fresh._draft_cache) == [b]
        assert [float(x).hex() for x in m._draft_pass_coeffs(b)] == [float(x).hex() for x in want]
        assert m.iteration_time_s((), b, 900 * b, 3) == fresh.iteration_time_s((), b, 900 * b, 3)
