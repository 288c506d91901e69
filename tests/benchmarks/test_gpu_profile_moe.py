"""benchmarks/gpu_profile_moe.py: the MoE layer it times is a correct MoE layer (checked on a CPU)."""

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def mods():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("gpu_profile_moe"), importlib.import_module("gpu_profile_moe_cuda")
    finally:
        sys.path.remove(str(BENCH))


def test_routing_groups_pairs_by_expert_in_padded_aligned_blocks(mods):
    _, cu = mods
    g = torch.Generator().manual_seed(3)
    n, e, k = 37, 8, 3
    logits = torch.randn(n, e, generator=g)
    w, tok, dest, offs = cu.route(logits, k, e, 16)
    ids = torch.topk(logits, k, dim=-1).indices
    sizes = torch.diff(offs, prepend=torch.zeros(1, dtype=torch.int32))
    assert (sizes % 16 == 0).all() and int(offs[-1]) >= n * k
    assert dest.unique().numel() == n * k  # every pair has its own row
    for p in range(n * k):  # the row of a pair lies in its expert's block
        t, d = int(tok[p]), int(dest[p])
        expert = int(torch.searchsorted(offs, torch.tensor(d, dtype=torch.int32), right=True))
        assert expert in ids[t].tolist()
    assert torch.allclose(torch.zeros(n).index_add_(0, tok, w), torch.ones(n), atol=1e-5)


def test_moe_layer_equals_a_loop_over_tokens_and_experts(mods):
    _, cu = mods
    b = cu.MoEBackend("cpu", moe_shapes={"t": (8, 64, 32, 2)})
    w1t, w2t, wr, _ = b.moe_weights("t")
    x = b._randn(11, 64, scale=1.0)
    got = cu.moe_layer(x, wr, w1t, w2t, 2, 22).float()
    want = cu.moe_layer_reference(x, wr, w1t, w2t, 2)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=0.05, atol=0.02 * float(want.abs().max()))


def test_the_script_writes_every_row_and_keeps_a_failing_kernel_as_an_error(mods, tmp_path):
    mp, _ = mods
    out = tmp_path / "moe.json"
    assert mp.main(["--out", str(out), "--quick", "--device", "cpu", "--tiny"]) == 0
    d = json.loads(out.read_text())
    assert len(d["rows"]) == len(mp.plan(quick=True, moe_shapes=mp.TINY_MOE_SHAPES, gemm_shapes=mp.TINY_GEMM_SHAPES))
    ok = [r for r in d["rows"] if "time_s" in r]
    assert {r["op"] for r in ok} == {"moe_experts", "moe_layer", "gemm"} and all(r["time_s"] > 0 for r in ok)
    assert all("error" in r for r in d["rows"] if "time_s" not in r)
    assert not list(tmp_path.glob("*.tmp"))
