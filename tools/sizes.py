"""No module past the style guide's 600 lines without a reason: ``make lint`` runs ``python -m tools.sizes``.

A module of our code (tests and migrations aside) longer than ``LIMIT`` lines fails unless its docstring gives
the reason in a paragraph that starts with ``Size:`` (why it is one room, and where it would split). Each module
that fails is named with its length, longest first.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

LIMIT = 600
SKIP = {".venv", "tests", "migrations", "node_modules", ".git"}


def reason(source: str) -> str | None:
    """The ``Size:`` paragraph of a module's docstring, or None."""
    try:
        doc = ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        return None
    for paragraph in doc.split("\n\n"):
        if paragraph.lstrip().startswith("Size:"):
            return paragraph.strip()
    return None


def too_long(paths: Iterable[Path], limit: int = LIMIT) -> list[tuple[int, Path]]:
    """The modules over ``limit`` lines with no reason given, longest first."""
    found = []
    for path in paths:
        source = path.read_text()
        lines = source.count("\n")
        if lines > limit and reason(source) is None:
            found.append((lines, path))
    return sorted(found, key=lambda item: (-item[0], str(item[1])))


def modules(root: Path) -> list[Path]:
    return [p for p in sorted(root.rglob("*.py")) if not SKIP.intersection(p.relative_to(root).parts)]


def main() -> int:
    found = too_long(modules(Path(".")))
    for lines, path in found:
        print(f"{path}: {lines} lines, over {LIMIT} with no 'Size:' paragraph in its docstring saying why")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
