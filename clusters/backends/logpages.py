"""Pages of an output kept as bytes (a file, or text a backend makes up), for ``Backend.logs``: read by
seeking, never whole. Pure but for reading the file object it is given.

The offset a page gives back is a byte count, written in decimal. A page is cut at the last line's end it
holds when more follows (so a reader never sees half a line unless a single line is longer than a page),
and never inside a UTF-8 character; bytes that are not UTF-8 are shown as U+FFFD.
"""

from __future__ import annotations

from typing import BinaryIO

from clusters.backends.base import BadOffset

#: How far back ``tail`` reads at a time.
BLOCK = 64 * 1024


def byte_offset(offset: str) -> int:
    """An offset this module gave (decimal bytes); ``BadOffset`` for anything else."""
    if not offset.isascii() or not offset.isdigit() or len(offset) > 18:
        raise BadOffset(f"offset {offset!r} is not a position in this output (a number of bytes)")
    return int(offset)


def read_page(file: BinaryIO, size: int, *, offset: str, tail: int | None, limit: int) -> tuple[bytes, int, int]:
    """(bytes, start, end) of one page of ``file``, ``size`` bytes long now: from ``offset``, else the last
    ``tail`` lines, else from 0; at most ``limit`` bytes."""
    if offset:
        start = min(byte_offset(offset), size)
    elif tail is not None:
        start = tail_start(file, size, tail, limit)
    else:
        start = 0
    file.seek(start)
    data = file.read(min(limit, size - start))
    if start + len(data) < size:  # more follows: end the page at a line's end, else at a character's
        data = cut(data)
    return data, start, start + len(data)


def tail_start(file: BinaryIO, size: int, lines: int, limit: int) -> int:
    """Where the last ``lines`` lines of ``file`` begin (a final line break ends the last line, it does not
    start another), reading backwards a block at a time and at most ``limit`` bytes: when the lines hold
    more, the start of the first whole line within the last ``limit`` bytes."""
    if lines <= 0:
        return size
    floor = max(0, size - limit)
    position, seen = size, 0
    # A final line break ends the last line: it is not counted as the start of another.
    if size:
        file.seek(size - 1)
        if file.read(1) == b"\n":
            position -= 1
    while position > floor:
        begin = max(floor, position - BLOCK)
        file.seek(begin)
        block = file.read(position - begin)
        index = len(block)
        while (index := block.rfind(b"\n", 0, index)) >= 0:
            seen += 1
            if seen == lines:
                return begin + index + 1
        position = begin
    if floor == 0:
        return 0
    file.seek(floor - 1)
    if file.read(1) == b"\n":
        return floor
    file.seek(floor)
    first = file.read(min(BLOCK, size - floor)).find(b"\n")
    return floor + first + 1 if first >= 0 else floor


def cut(data: bytes) -> bytes:
    """``data`` up to its last line break, or when it has none, without a UTF-8 character cut at its end."""
    newline = data.rfind(b"\n")
    if newline >= 0:
        return data[: newline + 1]
    if len(data) < 4:  # too short a page to cut: taken whole, so that a reader always moves on
        return data
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data  # ASCII ends it: whole
        if byte >= 0xC0:  # a lead byte: whole when its sequence is
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


def text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
