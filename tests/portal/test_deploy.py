"""The image holds every package of the project: a package added to ``pyproject.toml`` and left out of the
Dockerfile would start in development and fail in the image (``INSTALLED_APPS`` names it)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_both_stages_of_the_dockerfile_copy_every_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {name.rstrip("*") for name in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    stages = (ROOT / "deploy" / "Dockerfile").read_text().split("\nFROM ")[1:]
    assert len(stages) == 2, "a build stage and a runtime stage"
    for stage in stages:
        copied = set(re.findall(r"^COPY (\w+) \1$", stage, re.MULTILINE))
        assert packages <= copied, f"not copied: {sorted(packages - copied)}"
