"""Finance's amount columns, declared once. Each column says its title (the downloads' header, and the pages'
heading), its name in the API's answers (and the pages' ``data-cell``), its unit and the row's figure it reads (in
the attribution's integers: thousandths of an accelerator-second, cents). The CSV and XLSX downloads, the pages
and the API all take their amounts through it, so they show the same figure under the same name, and a new
amount column is one line here (docs/extending.md, "A column in Finance's reports").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from billing.attribution import hours, money

HOURS = "hours"
MONEY = "money"


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    title: str
    unit: str
    #: The row's figure, as ``Attribution`` keeps it: milli-seconds for hours, cents for money.
    source: str

    @property
    def heading(self) -> str:
        return self.title[:1].upper() + self.title[1:]

    def exact(self, row: Mapping[str, Any]) -> Decimal:
        """The figure as the downloads hold it: hours to three places, money to the cent."""
        return hours(row[self.source]) if self.unit == HOURS else money(row[self.source])

    def shown(self, row: Mapping[str, Any]) -> str:
        """The figure as the pages show it: thousands grouped, hours to a tenth, money to the cent."""
        return f"{self.exact(row):,.1f}" if self.unit == HOURS else f"{self.exact(row):,.2f}"


#: A month's costs however they are grouped (a team, a statement's line, a day, the fleet).
AMOUNTS = (
    Column("accelerator_hours", "accelerator-hours", HOURS, "milli_seconds"),
    Column("usage", "usage", MONEY, "usage"),
    Column("idle_share", "idle share", MONEY, "idle"),
    Column("overhead_share", "overhead share", MONEY, "overhead"),
    Column("total", "total", MONEY, "total"),
)
#: A job's costs: its usage only (idle capacity and overhead are charged to its team).
JOB_AMOUNTS = (
    Column("accelerator_hours", "accelerator-hours", HOURS, "milli_seconds"),
    Column("usage", "usage", MONEY, "cost"),
)


def titles(columns: Sequence[Column]) -> tuple[str, ...]:
    return tuple(column.title for column in columns)


def exact(columns: Sequence[Column], row: Mapping[str, Any]) -> list[Decimal]:
    return [column.exact(row) for column in columns]


def answered(columns: Sequence[Column], row: Mapping[str, Any]) -> dict[str, str]:
    """The figures as the API answers them: by name, as decimal strings."""
    return {column.key: str(column.exact(row)) for column in columns}


def shown(columns: Sequence[Column], row: Mapping[str, Any]) -> dict[str, Any]:
    """The figures for a page: by name, and in order as ``cells`` (name, text) for the table's row."""
    texts = {column.key: column.shown(row) for column in columns}
    return {**texts, "cells": list(texts.items())}
