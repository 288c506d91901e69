"""pyproject.toml's licence is a PEP 639 SPDX expression with its file (issue 25, item 16: the
``project.license`` TOML table is deprecated by setuptools and warned on every build)."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_licence_is_an_spdx_string_with_its_file_and_setuptools_does_not_warn(monkeypatch):
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert all((ROOT / f).is_file() for f in project["license-files"])
    monkeypatch.chdir(ROOT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert not [w for w in caught if "license" in str(w.message).lower()], [str(w.message) for w in caught]
    assert dist.metadata.license_expression == "MIT"
