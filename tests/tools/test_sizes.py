"""The size check ``make lint`` runs (``tools/sizes.py``): a module past 600 lines fails unless its docstring
says why in a ``Size:`` paragraph; shorter modules, tests and migrations are not judged."""

from __future__ import annotations

from pathlib import Path

from tools.sizes import LIMIT, modules, reason, too_long


def _module(path: Path, doc: str, lines: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "\n".join(f"x{i} = {i}" for i in range(lines))
    path.write_text(f'"""{doc}"""\n\n{body}\n')
    return path


def test_a_long_module_without_a_reason_fails_and_one_with_a_reason_passes(tmp_path: Path) -> None:
    long = _module(tmp_path / "app" / "long.py", "Does many things.", LIMIT + 10)
    excused = _module(
        tmp_path / "app" / "excused.py", "Does many things.\n\nSize: one protocol, one file.\n", LIMIT + 50
    )
    short = _module(tmp_path / "app" / "short.py", "Small.", 20)
    _module(tmp_path / "tests" / "test_long.py", "A test.", LIMIT + 10)
    _module(tmp_path / "app" / "migrations" / "0001_initial.py", "A migration.", LIMIT + 10)

    found = too_long(modules(tmp_path))

    assert found == [(LIMIT + 12, long)]
    assert excused in modules(tmp_path)
    assert short in modules(tmp_path)


def test_the_reason_is_the_size_paragraph_of_the_docstring() -> None:
    assert reason('"""What it does.\n\nSize: why it is long.\nStill why."""') == "Size: why it is long.\nStill why."
    assert reason('"""What it does. Size: not a paragraph of its own."""') is None
    assert reason("x = 1\n") is None
