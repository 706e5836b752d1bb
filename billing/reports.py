"""Finance's downloads: a team's monthly statement and the fleet's summary, as CSV and XLSX.

Both read an ``Attribution`` (``attribution.py``) already cut to what the reader may see, so every figure
is the same whole-cent amount the pages and the API show, and a statement's lines add up to its total.
CSV is written row by row as it is sent; XLSX is written by openpyxl's write-only workbook into a spooled
temporary file (memory up to a few megabytes, disk beyond) and sent from there in chunks.

Every cell is data, never a formula: names come from users (a job called ``=HYPERLINK(...)``, a project called
``=cmd|' /C calc'!A0``), and a spreadsheet would run them. ``reads_as_formula`` is the one rule both writers
ask (OWASP's, for CSV injection); each marks such a text as text in its own format.
"""

from __future__ import annotations

import csv
import datetime as dt
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, Any

from openpyxl import Workbook
from openpyxl.cell import Cell, WriteOnlyCell
from openpyxl.styles import Font
from openpyxl.worksheet._write_only import WriteOnlyWorksheet

from billing.attribution import Attribution, JobCost, Line, apportion, hours, money
from billing.columns import AMOUNTS, JOB_AMOUNTS, exact, titles

#: Columns of allocated-but-idle cost (``attribution``'s module says how they are reckoned; ``IDLE_RULE``).
WASTE = ("measured GPU utilization", "allocated idle (part of usage)", "unmeasured (part of usage)")
#: Energy the accelerators drew (kWh), and the part estimated for time without power readings (``ENERGY_RULE``).
ENERGY = ("energy kWh", "of which estimated kWh", "emissions kg CO2e")
STATEMENT_BY = ("project", "user", "cluster", "flavor", "capacity_type", "corrects")
STATEMENT_HEADER = (
    "month",
    "team",
    "project",
    "user",
    "cluster",
    "flavor",
    "capacity type",
    "correction of",
    "cost centre",
    "currency",
    *titles(AMOUNTS),
    *WASTE,
    *ENERGY,
)
FLEET_HEADER = ("month", "team", "cost centre", "currency", *titles(AMOUNTS), *WASTE, *ENERGY)
POOL_HEADER = (
    "month",
    "cluster",
    "flavor",
    "capacity type",
    "capacity accelerator-hours",
    "used accelerator-hours",
    "utilisation",
    "cost",
    "used",
    "idle",
    "priced",
)
DAY_HEADER = ("day", "team", *titles(AMOUNTS))
JOB_HEADER = ("job", "name", "team", "project", "user", *titles(JOB_AMOUNTS), *WASTE, *ENERGY)
RULE = (
    "Usage: accelerator-hours at the price book's rate for the day, cluster, flavor and capacity type. "
    "Each day, once over, shares its idle capacity and its equal part of the month's overhead: a pool's (cluster, "
    "flavor, capacity type) idle among that day's users of the pool in proportion to their accelerator-hours; a "
    "pool nobody used, and the overhead, among all of that day's usage in proportion to its cost (a day with no "
    "usage hands them on to the next day with usage; what is left at the month's end goes to all its usage). "
    "Each team's amounts are rounded down to the cent; what rounding leaves stays unallocated, so they add up to "
    "the fleet's total."
)
ENERGY_RULE = (
    "Energy: the power the node probes read of a job's GPUs (a node's mean power per GPU, over the GPUs it held) over "
    "the time they read it; time without power readings is estimated at the month's measured mean power per GPU of "
    "the same accelerator type, or, for a type never read, at the price book's power per accelerator of an owned "
    "node, and shown as estimated. Emissions: the energy at the grid intensity (g CO2e per kWh) set for the "
    "region of the line's cluster on its day; none where no intensity is set."
)
IDLE_RULE = (
    "Allocated idle and unmeasured are parts of usage, not charges on top. Of each line's accelerator-hours, "
    "the node probes measured some; measured GPU utilization is their busy share (a GPU at 40 % for an hour "
    "is 0.4 busy hours). Allocated idle = usage x (measured - busy) / allocated hours; unmeasured = usage x "
    "(allocated - measured) / allocated hours: time without readings is unmeasured, never idle. A node shared "
    "by several jobs shares its busy GPU-hours evenly over the GPUs they hold."
)
Row = Sequence[Any]


def month_label(month: dt.date) -> str:
    return month.strftime("%Y-%m")


def _amounts(row: dict[str, Any]) -> list[Any]:
    return list(exact(AMOUNTS, row))


def utilization_cell(measured: int, busy: int) -> Decimal | None:
    """Busy over measured as a fraction to four places; None (an empty cell) where nothing was measured."""
    return (Decimal(busy) / Decimal(measured)).quantize(Decimal("0.0001")) if measured else None


def _waste(row: dict[str, Any]) -> list[Any]:
    """Measured utilization, allocated idle and unmeasured: the ``WASTE`` columns of a rolled-up row."""
    return [
        utilization_cell(row["measured_milli_seconds"], row["busy_milli_seconds"]),
        money(row["allocated_idle"]),
        money(row["unmeasured"]),
    ]


def kilo(amount: int) -> Decimal:
    """Thousands of a unit to three places: watt-hours as kWh, grams as kg."""
    return (Decimal(amount) / 1000).quantize(Decimal("0.001"))


def _energy(row: dict[str, Any]) -> list[Any]:
    """The ``ENERGY`` columns of a rolled-up row: kWh, of which estimated, and kg of CO2e."""
    return [kilo(row["energy_wh"]), kilo(row["estimated_wh"]), kilo(row["emissions_g"])]


def _line_totals(attribution: Attribution) -> dict[str, Any]:
    """``totals`` with the measured and busy sums the ``WASTE`` columns need."""
    totals: dict[str, Any] = attribution.totals()
    totals["measured_milli_seconds"] = sum(line.measured_milli_seconds for line in attribution.lines)
    totals["busy_milli_seconds"] = sum(line.busy_milli_seconds for line in attribution.lines)
    return totals


def statement_rows(attribution: Attribution, team: int) -> Iterator[Row]:
    """A team's month per project, user, cluster, flavor and capacity type, then its total."""
    mine = attribution.for_teams([team], attribution.fleet_visible)
    label, name = month_label(attribution.month), attribution.names.of("team", team)
    # This month's lines first, then the corrections of closed months booked in it (their month named).
    rows = sorted(mine.rollup(STATEMENT_BY), key=lambda r: r["corrects"] is not None)
    names, money_in = attribution.names, attribution.currency
    for row in rows:
        labels = [names.of(d, row[d]) for d in STATEMENT_BY[:-1]]
        corrects = month_label(row["corrects"]) if row["corrects"] else ""
        code = names.cost_centre(team, row["project"])
        yield [label, name, *labels, corrects, code, money_in, *_amounts(row), *_waste(row), *_energy(row)]
    totals = _line_totals(mine)
    code = names.cost_centre(team, None)
    yield [
        label,
        name,
        "Total",
        "",
        "",
        "",
        "",
        "",
        code,
        money_in,
        *_amounts(totals),
        *_waste(totals),
        *_energy(totals),
    ]


def statement_days(attribution: Attribution, team: int) -> Iterator[Row]:
    """A statement's days, then its total (the Summary's)."""
    mine = attribution.for_teams([team], attribution.fleet_visible)
    name = attribution.names.of("team", team)
    for row in sorted(mine.rollup(["day"]), key=lambda r: r["day"]):
        yield [row["day"], name, *_amounts(row)]
    yield [None, "Total", *_amounts(mine.totals())]


def unallocated_row(attribution: Attribution) -> dict[str, int]:
    """What stayed unallocated as a row of amounts: idle capacity and overhead with no usage to share them."""
    idle, overhead = attribution.unallocated_idle, attribution.unallocated_overhead
    return {"milli_seconds": 0, "usage": 0, "idle": idle, "overhead": overhead, "total": idle + overhead}


def fleet_rows(attribution: Attribution) -> Iterator[Row]:
    """Every team's month, what stayed unallocated, and the fleet's total (which they add up to)."""
    label, names, money_in = month_label(attribution.month), attribution.names, attribution.currency
    for row in attribution.rollup(["team"]):
        yield [
            label,
            row["team_name"],
            names.cost_centre(row["team"], None),
            money_in,
            *_amounts(row),
            *_waste(row),
            *_energy(row),
        ]
    if attribution.unallocated:
        yield [
            label,
            "Unallocated",
            "",
            money_in,
            *_amounts(unallocated_row(attribution)),
            None,
            money(0),
            money(0),
            None,
            None,
            None,
        ]
    totals = _line_totals(attribution)
    yield [label, "Fleet total", "", money_in, *_amounts(attribution.fleet_totals()), *_waste(totals), *_energy(totals)]


def pool_rows(attribution: Attribution, total: bool = False) -> Iterator[Row]:
    """Every pool's month; with ``total``, then their sum (the Summary's capacity cost)."""
    label, names = month_label(attribution.month), attribution.names
    if total:
        yield from pool_rows(attribution)
        pools = attribution.pools
        capacity, used = sum(p.capacity_milli_seconds for p in pools), sum(p.used_milli_seconds for p in pools)
        cost, spent = attribution.capacity_cost, sum(p.used for p in pools)
        share = round(used / capacity, 4) if capacity else None
        yield [
            label,
            "Total",
            "",
            "",
            hours(capacity),
            hours(used),
            share,
            money(cost),
            money(spent),
            money(cost - spent),
            "",
        ]
        return
    for p in attribution.pools:
        utilisation = round(p.utilisation, 4) if p.utilisation is not None else None
        yield [
            label,
            names.of("cluster", p.cluster),
            names.of("flavor", p.flavor),
            names.of("capacity_type", p.capacity_type),
            hours(p.capacity_milli_seconds),
            hours(p.used_milli_seconds),
            utilisation,
            money(p.cost),
            money(p.used),
            money(p.idle),
            p.priced,
        ]


def fleet_days(attribution: Attribution) -> Iterator[Row]:
    """Every team's days, then what stayed unallocated and the fleet's total, which they add up to."""
    for row in sorted(attribution.rollup(["day", "team"]), key=lambda r: (r["day"], r["team_name"])):
        yield [row["day"], row["team_name"], *_amounts(row)]
    if attribution.unallocated:
        yield [None, "Unallocated", *_amounts(unallocated_row(attribution))]
    yield [None, "Fleet total", *_amounts(attribution.fleet_totals())]


def job_rows(attribution: Attribution, jobs: Iterable[JobCost], costs: Sequence[int] | None = None) -> Iterator[Row]:
    """A row per job; ``costs``: the jobs' costs in cents to show instead of each rounded on its own."""
    names = attribution.names
    for i, job in enumerate(jobs):
        cost = job.cost if costs is None else costs[i]
        yield [
            job.job,
            job.name,
            names.of("team", job.team),
            names.of("project", job.project),
            names.of("user", job.user),
            *exact(JOB_AMOUNTS, {"milli_seconds": job.milli_seconds, "cost": cost}),
            utilization_cell(*attribution.job_measures.get(job.job, (0, 0, 0))[1:]),
            *(money(cents) for cents in attribution.job_split(job.job, cost)),
            *(kilo(amount) for amount in attribution.job_energy.get(job.job, (0, 0, 0))),
        ]


def statement_jobs(attribution: Attribution, team: int, jobs: Iterable[JobCost]) -> Iterator[Row]:
    """A statement's Jobs sheet: every job of the team in the month, their costs apportioned to the cent so they add
    up to the team's usage (each rounded alone, a thousand jobs drift by dollars), the corrections of closed months
    booked this month (no job's), and the total, which is the Summary's usage."""
    mine = [line for line in attribution.lines if line.team == team]
    own = sum(line.usage for line in mine if line.corrects is None)
    corrections = sum(line.usage for line in mine if line.corrects is not None)
    listed = list(jobs)
    costs = apportion([job.amount for job in listed], own) if listed else []
    yield from job_rows(attribution, listed, costs)
    blank = [None, money(0), money(0)]
    if corrections:
        yield ["", "Corrections of closed months", "", "", "", hours(0), money(corrections), *blank, None, None, None]
    held = sum(job.milli_seconds for job in listed)
    energy = [sum(attribution.job_energy.get(job.job, (0, 0, 0))[i] for job in listed) for i in (0, 1, 2)]
    yield ["", "Total", "", "", "", hours(held), money(own + corrections), *blank, *map(kilo, energy)]


#: A cell whose text starts with one of these is taken for a formula by Excel, LibreOffice or Google Sheets.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def reads_as_formula(value: Any) -> bool:
    """Whether a spreadsheet would read this cell as a formula. Only texts are: amounts and hours are
    ``Decimal``, days are dates, so a negative amount stays a number."""
    return isinstance(value, str) and value.startswith(FORMULA_STARTS)


def _csv_cell(value: Any) -> Any:
    # A leading apostrophe is what a spreadsheet itself puts before a text that looks like a formula.
    return f"'{value}" if reads_as_formula(value) else value


class _Line:
    """A file-like object ``csv.writer`` writes one row into, which the stream then hands on."""

    def write(self, value: str) -> str:
        return value


def csv_stream(header: Row, rows: Iterable[Row]) -> Iterator[str]:
    # Texts are quoted too, so a text holding a semicolon stays one cell where the list separator is ';'.
    writer = csv.writer(_Line(), quoting=csv.QUOTE_NONNUMERIC)
    yield writer.writerow([_csv_cell(value) for value in header])
    for row in rows:
        yield writer.writerow([_csv_cell(value) for value in row])


MONEY_FORMAT = "#,##0.00"
MONEY_COLUMNS = ("usage", "idle share", "overhead share", "total", "cost", "used", "idle", "amount (a month)")


def money_format(currency: str) -> str:
    """Excel's format of an amount in ``currency``: grouped, to the cent, with its code ("1,234.50 USD")."""
    return f'{MONEY_FORMAT} "{currency}"' if currency else MONEY_FORMAT


HOURS_FORMAT = "#,##0.000"


def _xlsx_cell(sheet: WriteOnlyWorksheet, value: Any) -> Cell:
    cell = WriteOnlyCell(sheet, value=value)
    if isinstance(value, str):
        # openpyxl takes a text starting with '=' for a formula and '#N/A' for an error: a text is a string.
        cell.data_type = "s"
        # What Excel records for a typed leading apostrophe: shown as typed, and still text when edited.
        cell.quotePrefix = reads_as_formula(value)
    return cell


def _sheet(book: Workbook, title: str, header: Row, rows: Iterable[Row], currency: str = "") -> None:
    sheet: WriteOnlyWorksheet = book.create_sheet(title)
    bold = Font(bold=True)
    heading = []
    for text in header:
        cell = _xlsx_cell(sheet, text)
        cell.font = bold
        heading.append(cell)
    sheet.append(heading)
    money_columns = {i for i, h in enumerate(header) if h in MONEY_COLUMNS}
    in_money = money_format(currency)
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            cell = _xlsx_cell(sheet, value)
            if isinstance(value, Decimal):
                cell.number_format = in_money if i in money_columns else HOURS_FORMAT
            cells.append(cell)
        sheet.append(cells)


def xlsx_file(
    summary: Sequence[tuple[str, Any]], sheets: Sequence[tuple[str, Row, Iterable[Row]]], currency: str = ""
) -> IO[bytes]:
    """A workbook with a Summary sheet of (label, value) pairs and the given sheets, rewound for reading; amounts
    shown with ``currency``'s code."""
    book = Workbook(write_only=True)
    _sheet(book, "Summary", ("", ""), summary)
    for title, header, rows in sheets:
        _sheet(book, title, header, rows, currency)
    out = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)  # noqa: SIM115 - handed to the response
    book.save(out)
    out.seek(0)
    return out


PRICE_HEADER = ("cluster", "flavor", "capacity type", "rate (an accelerator-hour)", "effective from", "until")
OVERHEAD_HEADER = ("overhead", "amount (a month)")


@dataclass(frozen=True)
class Issue:
    """What a statement issued at a month's close says of itself: its number, when and by whom the month was
    closed, and the price book and overhead in force in the month."""

    number: str
    issued_at: dt.datetime
    closed_by: str
    prices: Sequence[Row]
    overhead: Sequence[Row]

    def summary(self) -> list[tuple[str, Any]]:
        return [
            ("Statement number", self.number),
            ("Issued", self.issued_at.strftime("%Y-%m-%d %H:%M UTC")),
            ("Month closed by", self.closed_by),
        ]

    def sheets(self) -> list[tuple[str, Row, Iterable[Row]]]:
        return [("Prices", PRICE_HEADER, self.prices), ("Overhead", OVERHEAD_HEADER, self.overhead)]


def _stamp(issue: Issue | None) -> list[tuple[str, Any]]:
    """The end of a summary: an issued statement's number and provenance, or when a draft was made."""
    if issue is None:
        return [("Generated", dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))]
    return issue.summary()


def _corrections(lines: Sequence[Line]) -> list[tuple[str, Any]]:
    """A Summary's line for the corrections of closed months booked in the month, when there are any."""
    booked = sum(line.total for line in lines if line.corrects is not None)
    months = sorted({month_label(line.corrects) for line in lines if line.corrects is not None})
    return [(f"Of which corrections of {', '.join(months)}", money(booked))] if months else []


def statement_xlsx(
    attribution: Attribution, team: int, jobs: Iterable[JobCost], issue: Issue | None = None
) -> IO[bytes]:
    totals = attribution.for_teams([team], attribution.fleet_visible).totals()
    summary = [
        ("Statement", f"{attribution.names.of('team', team)}, {month_label(attribution.month)}"),
        ("Currency", attribution.currency),
        ("Cost centre", attribution.names.cost_centre(team, None)),
        ("Accelerator-hours", hours(totals["milli_seconds"])),
        ("Usage", money(totals["usage"])),
        ("Idle capacity share", money(totals["idle"])),
        ("Shared overhead share", money(totals["overhead"])),
        ("Total", money(totals["total"])),
        *_corrections([line for line in attribution.lines if line.team == team]),
        ("Allocated idle (part of usage)", money(totals["allocated_idle"])),
        ("Unmeasured (part of usage)", money(totals["unmeasured"])),
        ("How it is allocated", RULE),
        ("Allocated idle and unmeasured", IDLE_RULE),
        ("Energy (kWh)", kilo(totals["energy_wh"])),
        ("Of which estimated (kWh)", kilo(totals["estimated_wh"])),
        ("Emissions (kg CO2e)", kilo(totals["emissions_g"])),
        ("How energy is reckoned", ENERGY_RULE),
        *_stamp(issue),
    ]
    return xlsx_file(
        summary,
        [
            ("Lines", STATEMENT_HEADER, statement_rows(attribution, team)),
            ("Days", DAY_HEADER, statement_days(attribution, team)),
            ("Jobs", JOB_HEADER, statement_jobs(attribution, team, jobs)),
            *(issue.sheets() if issue else []),
        ],
        attribution.currency,
    )


def fleet_xlsx(attribution: Attribution, issue: Issue | None = None) -> IO[bytes]:
    totals = attribution.fleet_totals()
    summary = [
        ("Fleet summary", month_label(attribution.month)),
        ("Currency", attribution.currency),
        ("Capacity cost", money(attribution.capacity_cost)),
        ("Shared overhead (the days over)", money(attribution.overhead)),
        ("Shared overhead of the whole month", money(attribution.overhead_of_month)),
        ("Fleet total", money(attribution.fleet_total)),
        *(
            [("Of which corrections of closed months", money(attribution.adjustments))]
            if attribution.adjustments
            else []
        ),
        ("Usage", money(totals["usage"])),
        ("Idle capacity", money(totals["idle"])),
        ("Allocated idle (part of usage)", money(totals["allocated_idle"])),
        ("Unmeasured (part of usage)", money(totals["unmeasured"])),
        ("Unallocated", money(attribution.unallocated)),
        ("Unpriced accelerator-hours", hours(attribution.unpriced_milli_seconds)),
        ("How it is allocated", RULE),
        ("Allocated idle and unmeasured", IDLE_RULE),
        ("Energy (kWh)", kilo(totals["energy_wh"])),
        ("Of which estimated (kWh)", kilo(totals["estimated_wh"])),
        ("Emissions (kg CO2e)", kilo(totals["emissions_g"])),
        ("How energy is reckoned", ENERGY_RULE),
        *_stamp(issue),
    ]
    return xlsx_file(
        summary,
        [
            ("Teams", FLEET_HEADER, fleet_rows(attribution)),
            ("Pools", POOL_HEADER, pool_rows(attribution, total=True)),
            ("Days", DAY_HEADER, fleet_days(attribution)),
            *(issue.sheets() if issue else []),
        ],
        attribution.currency,
    )
