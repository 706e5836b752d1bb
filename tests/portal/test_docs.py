"""The maps of the code name every package: the README's and docs/architecture.md's tables have a row for each
package the import contracts cover (``root_packages``) and for ``tools/``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [*tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"], "tools"]


@pytest.mark.parametrize("document", ["README.md", "docs/architecture.md"])
def test_every_package_has_its_row_in_the_map(document: str) -> None:
    text = (ROOT / document).read_text()
    missing = [package for package in PACKAGES if f"\n| `{package}/` |" not in text]
    assert not missing, f"{document} has no row for {missing}"
