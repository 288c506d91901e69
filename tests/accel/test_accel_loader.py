"""The compiled simulator core is used only when its build is complete and current, never when
forced off, and gives bit-identical results (every check in a fresh process)."""

from __future__ import annotations

import json
import shutil

from accel_util import run_py

from inferencegym import accel

WHERE = ("import inferencegym, inferencegym.sim.replica as r, inferencegym.sim.cluster as c\n"
         "print(inferencegym.accel.active(), r.__file__.endswith('.py'), c.__file__.endswith('.py'))\n"
         "print(inferencegym.accel.status())\n")

DIGEST = ("import importlib.util, json, inferencegym\n"
          "s = importlib.util.spec_from_file_location('d', 'benchmarks/sim_digest.py')\n"
          "d = importlib.util.module_from_spec(s); s.loader.exec_module(d)\n"
          "out = {}\n"
          "for k in ('simulate/vllm_lor_4', 'simulate/prefix_llmd', 'simulate/sarathi_p2c_priority',\n"
          "          'single/static_workload/heuristic', 'cluster/cluster_routing/round_robin'):\n"
          "    out.update(d.compute(k))\n"
          "print(json.dumps({'active': inferencegym.accel.active(), 'digest': out}))\n")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_a_current_build_is_loaded_for_every_listed_module(compiled_dir):
    res = run_py(WHERE, accel_dir=compiled_dir)
    assert res.returncode == 0, res.stderr[-3000:]
    first, status = res.stdout.strip().splitlines()
    assert first == "True False False"
    assert status.startswith("compiled (") and str(compiled_dir) in status
    res = run_py("", accel_dir=compiled_dir, args=["-m", "inferencegym.accel", "status"])
    assert res.stdout.startswith("compiled (")


def test_one_stale_source_keeps_every_module_pure_python(compiled_dir, tmp_path):
    stale = _copy(compiled_dir, tmp_path / "build")
    man = json.loads((stale / accel.MANIFEST).read_text())
    man["modules"]["inferencegym.sim.events"]["sha256"] = "0" * 64  # as if events.py was edited since
    (stale / accel.MANIFEST).write_text(json.dumps(man))
    res = run_py(WHERE, accel_dir=stale)
    assert res.returncode == 0, res.stderr[-3000:]
    first, status = res.stdout.strip().splitlines()
    assert first == "False True True"  # replica.py and cluster.py were current: still pure (all or nothing)
    assert status == "pure Python: stale: inferencegym/sim/events.py changed since the build (rebuild)"


def test_a_missing_binary_or_another_module_list_keeps_pure_python(compiled_dir, tmp_path):
    gone = _copy(compiled_dir, tmp_path / "gone")
    man = json.loads((gone / accel.MANIFEST).read_text())
    (gone / man["modules"]["inferencegym.sim.batching"]["binary"]).unlink()
    files, why = accel.check(gone)
    assert files is None and why.startswith("missing binary")
    other = _copy(compiled_dir, tmp_path / "other")
    man = json.loads((other / accel.MANIFEST).read_text())
    del man["modules"]["inferencegym.sim.slo"]
    (other / accel.MANIFEST).write_text(json.dumps(man))
    assert accel.check(other) == (None, "built for another module list (rebuild)")
    assert accel.check(tmp_path / "nothing")[1].startswith("not built")


def test_the_environment_variable_forces_pure_python(compiled_dir):
    res = run_py(WHERE, accel_dir=compiled_dir, pure=True)
    assert res.returncode == 0, res.stderr[-3000:]
    first, status = res.stdout.strip().splitlines()
    assert first == "False True True"
    assert status == "pure Python: pure Python forced (INFERENCEGYM_PURE_PYTHON=1)"


def test_compiled_and_pure_python_give_bit_identical_digests(compiled_dir):
    runs = []
    for pure in (False, True):
        res = run_py(DIGEST, accel_dir=compiled_dir, pure=pure)
        assert res.returncode == 0, res.stderr[-3000:]
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    assert runs[0]["active"] is True and runs[1]["active"] is False
    assert len(runs[0]["digest"]) == 5
    assert runs[0]["digest"] == runs[1]["digest"]
