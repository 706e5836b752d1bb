"""Writing many rows at once on PostgreSQL: COPY them into a temporary table, then one UPDATE ... FROM it.

Django's ``bulk_update`` builds a CASE per column and row (110 s for 8,000 nodes), so the cluster sync
and the placement loop's pending reasons stage their rows this way instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any


@contextmanager
def staged(cursor: Any, name: str, columns: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]]) -> Iterator[None]:
    """A temporary table ``name`` with ``columns`` (name, SQL type) holding ``rows``, while the block runs.
    It is dropped at the end of the block, not at commit: a caller's transaction may stage it twice."""
    typed = ", ".join(f"{column} {sql_type}" for column, sql_type in columns)
    cursor.execute(f"CREATE TEMPORARY TABLE {name} ({typed}) ON COMMIT DROP")
    names = ", ".join(column for column, _ in columns)
    with cursor.cursor.copy(f"COPY {name} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    yield
    cursor.execute(f"DROP TABLE {name}")
