"""``import inferencegym`` is cheap (no Gymnasium import) yet registers the env id in either import
order (the other order and ``gym.make("inferencegym:...")`` are in test_architecture.py)."""

from __future__ import annotations

import subprocess
import sys


def test_the_package_registers_its_env_when_gymnasium_comes_after_it():
    code = ("import sys, inferencegym\n"
            "assert 'gymnasium' not in sys.modules, 'import inferencegym imported gymnasium'\n"
            "import gymnasium\n"
            "assert inferencegym.ENV_ID in gymnasium.registry\n"
            "assert type(gymnasium.__loader__).__name__ == 'SourceFileLoader'\n"
            "import importlib; importlib.reload(inferencegym)\n"
            "print(sum(1 for f in sys.meta_path if type(f).__name__ == '_RegisterAfterGymnasium'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "0"  # the hook removes itself
