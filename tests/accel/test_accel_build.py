"""A build that cannot be done says why in one line, leaves nothing half-written and keeps pure
Python in force; ``--strict`` turns that into a failure for a CI step that needs the compiled core."""

from __future__ import annotations

from accel_util import run_py

from inferencegym import accel


def test_no_c_compiler_falls_back_in_one_line(tmp_path):
    out = tmp_path / "build"
    code = ("import os, sys\nos.environ['CC'] = '/nonexistent/cc'\n"
            "from inferencegym.accel.__main__ import main\nsys.exit(main(['build', '--out', sys.argv[1]]))\n")
    res = run_py("", args=["-c", code, str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines() == [
        "accel: not built, pure Python stays in force: no C compiler ('/nonexistent/cc' not found; install gcc or set CC)"]
    assert not out.exists() and list(tmp_path.iterdir()) == []
    strict = run_py("", args=["-c", code.replace("'--out'", "'--strict', '--out'"), str(out)])
    assert strict.returncode == 1 and "no C compiler" in strict.stdout


def test_no_mypyc_falls_back_in_one_line(tmp_path):
    code = ("import sys\nsys.modules['mypyc'] = sys.modules['mypyc.build'] = None  # as if not installed\n"
            "from inferencegym.accel.__main__ import main\nsys.exit(main(['build', '--out', sys.argv[1]]))\n")
    res = run_py("", args=["-c", code, str(tmp_path / "build")])
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "accel: not built, pure Python stays in force: mypyc is not installed (`pip install mypy`)"
    assert list(tmp_path.iterdir()) == []  # the temporary work folder is gone too


def test_the_manifest_records_every_source_hash(compiled_dir):
    import json

    man = json.loads((compiled_dir / accel.MANIFEST).read_text())
    assert man["cflags"] == ["-ffp-contract=off"] and man["ext_suffix"] == accel.ext_suffix()
    for m in accel.MODULES:
        assert man["modules"][m]["sha256"] == accel.sha256_file(accel.source_path(m))
        assert (compiled_dir / man["modules"][m]["binary"]).is_file()
