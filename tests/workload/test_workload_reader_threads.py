"""Small traces are parsed without pyarrow's thread pool (its start-up costs more than the parse);
what is read does not depend on it."""

from __future__ import annotations

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.json as pj

from inferencegym.workload import load_trace
from inferencegym.workload.arrow_np import threads_pay


def _csv(tmp_path, rows):
    p = tmp_path / "t.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(f"{t},{a},{b}\n" for t, a, b in rows))
    return p


def test_threads_pay_only_for_files_of_several_blocks(tmp_path):
    p = _csv(tmp_path, [(i * 0.5, 10 + i, 3) for i in range(100)])
    size = p.stat().st_size
    assert not threads_pay(p, size)
    assert not threads_pay(p, size // 2)  # two blocks: still one thread
    assert threads_pay(p, size // 3)
    assert threads_pay(tmp_path / "missing.csv", 1)  # (pyarrow reports the missing file itself)


def _same(a, b):
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("arrival_s", "prompt_tokens", "output_tokens"))


def test_a_trace_reads_the_same_with_and_without_threads(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    rows = [(float(t), int(p), int(o)) for t, p, o in zip(np.cumsum(rng.exponential(0.3, 5000)),
                                                          rng.integers(0, 4000, 5000), rng.integers(1, 900, 5000))]
    p = _csv(tmp_path, rows)
    plain = load_trace(p, format="replay")
    orig = pcsv.ReadOptions
    monkeypatch.setattr(pcsv, "ReadOptions", lambda **kw: orig(**{**kw, "use_threads": True, "block_size": 4096}))
    threaded = load_trace(p, format="replay")
    assert _same(plain, threaded) and len(plain) == 5000

    j = tmp_path / "t.jsonl"
    j.write_text("".join(f'{{"timestamp": {int(t * 1000)}, "input_length": {max(a, 1) + 600}, "output_length": {b}, '
                         f'"hash_ids": [{2 * i}, {2 * i + 1}]}}\n' for i, (t, a, b) in enumerate(rows)))
    plain = load_trace(j, format="mooncake")
    origj = pj.ReadOptions
    monkeypatch.setattr(pj, "ReadOptions", lambda **kw: origj(**{**kw, "use_threads": True, "block_size": 8192}))
    threaded = load_trace(j, format="mooncake")
    assert _same(plain, threaded) and len(plain) == 5000
    assert [h.tolist() for h in plain.hash_ids[:50]] == [h.tolist() for h in threaded.hash_ids[:50]]


def test_to_requests_builds_the_requests_keyword_construction_gives(tmp_path):
    from dataclasses import fields

    from inferencegym.sim.request import Request

    assert [f.name for f in fields(Request)][:6] == ["req_id", "arrival_s", "prompt_tokens", "output_tokens",
                                                     "tenant", "priority"]  # (to_requests passes them by position)
    p = tmp_path / "t.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,tenant,priority\n"
                 "0.5,0,3,1,0\n1.25,17,1,0,1\n2.0,4000,9,1,1\n")
    got = load_trace(p, format="replay").to_requests(first_id=7)
    want = [Request(req_id=7, arrival_s=0.5, prompt_tokens=1, output_tokens=3, tenant=1, priority=0),
            Request(req_id=8, arrival_s=1.25, prompt_tokens=17, output_tokens=1, tenant=0, priority=1),
            Request(req_id=9, arrival_s=2.0, prompt_tokens=4000, output_tokens=9, tenant=1, priority=1)]
    key = [f.name for f in fields(Request)]
    # (repr: NaN fields compare equal, whether or not they are one object, as under the compiled core)
    assert [[repr(getattr(r, k)) for k in key] for r in got] == [[repr(getattr(r, k)) for k in key] for r in want]
    assert all(type(r.arrival_s) is float and type(r.prompt_tokens) is int for r in got)
