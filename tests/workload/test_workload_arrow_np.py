"""Arrow columns to numpy without pandas (``workload/arrow_np.py``): the same values and dtype as
``pyarrow``'s ``to_numpy``, and loading a CSV trace in a fresh process does not import pandas
(~0.24 CPU s of every ``inferencegym simulate --trace`` run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

from inferencegym.workload.arrow_np import to_numpy


@pytest.mark.parametrize("typ", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(),
                                 pa.uint64(), pa.float32(), pa.float64()])
def test_numeric_columns_equal_to_numpy_with_offsets_and_chunks(typ):
    rng = np.random.default_rng(3)
    vals = rng.integers(0, 100, size=57).tolist()
    arr = pa.array(vals, type=typ)
    for a in (arr, arr.slice(5), arr.slice(7, 20), arr.slice(57)):
        got, want = to_numpy(a), a.to_numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    ch = pa.chunked_array([arr.slice(0, 10), arr.slice(10, 30), arr.slice(40)])
    got = to_numpy(ch)
    assert got.dtype == ch.to_numpy().dtype
    np.testing.assert_array_equal(got, ch.to_numpy())


def test_other_columns_fall_back_to_pyarrow():
    for a in (pa.array([True, False, True]), pa.array([1, None, 3]), pa.array(["a", "b"])):
        got, want = to_numpy(a), a.to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)  # (NaN where the null is, on both sides)
    lst = pa.array([[1, 2], [3], []], type=pa.list_(pa.int64()))
    np.testing.assert_array_equal(to_numpy(lst.offsets), np.array([0, 2, 3, 3], np.int32))
    np.testing.assert_array_equal(to_numpy(lst.flatten()), np.array([1, 2, 3]))


def test_loading_a_csv_trace_does_not_import_pandas(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n0.5,20,7\n1.25,30,9\n")
    code = textwrap.dedent(f"""
        import sys
        from inferencegym.workload import load_trace
        wl = load_trace({str(p)!r}, format="replay")
        assert wl.prompt_tokens.tolist() == [10, 20, 30], wl.prompt_tokens
        assert wl.arrival_s.tolist() == [0.0, 0.5, 1.25], wl.arrival_s
        print("pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
