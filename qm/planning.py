"""``qm forecast`` and ``qm plan``: Procurement's questions from a terminal, through the same API (and so the same
scoping and permissions: finance, procurement and admins) as the capacity pages.

- ``qm forecast [--horizon 12w|6m] [--flavor F] [--teams]``: per accelerator type, how far the forecast can be
  trusted (in words), its backtest at 1, 4 and 12 weeks beside repeating the last week, and its weeks against
  capacity (the weeks demand may pass it marked); ``--teams`` adds each team's part;
- ``qm plan`` lists the capacity plan; ``qm plan add order|retirement|commitment ...`` and ``qm plan remove ID``
  change it.

``--json`` prints the API's answer instead. ``qm.cli`` registers the commands and lends them its table format and
its error (``admin.Lent``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from qm.admin import Lent

if TYPE_CHECKING:
    from qm.client import Client, Settings

OK = 0


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _range(week: dict[str, Any], level: int) -> str:
    low, high = week[f"lower_{level}"], week[f"upper_{level}"]
    return "not calibrated" if low is None or high is None else f"{_hours(low)}-{_hours(high)}"


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def forecast(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        query = {"horizon": args.horizon, "flavor": args.flavor}
        answer = client.get("forecasts/", {k: v for k, v in query.items() if v})
        if args.json:
            print(json.dumps(answer, indent=2), file=settings.out)
            return OK
        out = settings.out
        for flavor in answer["flavors"]:
            print(f"{flavor['flavor']}: {flavor['accelerators']} accelerators now", file=out)
            if flavor["message"]:
                print(f"  No forecast: {flavor['message']}.", file=out)
                continue
            print(f"  {flavor['verdict']}", file=out)
            scores = [s for s in flavor["backtest"]["scores"] if s["pairs"]]
            if scores:
                rows = [["HORIZON", "WAPE", "LAST WEEK REPEATED", "80% HELD", "95% HELD"]]
                for s in scores:
                    rows.append(
                        [
                            f"{s['weeks']} w",
                            _percent(s["wape"]),
                            _percent(s["baseline_wape"]),
                            _percent(s["coverage_80"]),
                            _percent(s["coverage_95"]),
                        ]
                    )
                self.lent.table(rows, out)
            rows = [["WEEK FROM", "DEMAND", "80%", "95%", "CAPACITY", "PASSES"]]
            for week in flavor["weeks"]:
                rows.append(
                    [
                        week["start"],
                        _hours(week["demand"]),
                        _range(week, 80),
                        _range(week, 95),
                        _hours(week["capacity"]),
                        week["exceeds"],
                    ]
                )
            self.lent.table(rows, out)
            if args.teams and flavor["teams"]:
                rows = [["TEAM", "FIRST WEEK", "80%", f"ALL {len(flavor['weeks'])} WEEKS"]]
                for team in flavor["teams"]:
                    first = team["weeks"][0]
                    total = sum(w["demand"] for w in team["weeks"])
                    rows.append([team["team"], _hours(first["demand"]), _range(first, 80), _hours(total)])
                self.lent.table(rows, out)
        print(f"Accelerator-hours; {answer['horizon']} from {answer['today']}.", file=out)
        return OK

    def plan(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        if args.action == "add":
            body = {
                "flavor": args.flavor,
                "kind": args.kind,
                "accelerators": args.accelerators,
                "ordered_on": args.ordered_on,
                "lead_days": args.lead_days,
                "starts_on": args.starts_on,
                "ends_on": args.ends_on,
                "note": args.note,
            }
            answer = client.call("POST", "capacity-plan/", body={k: v for k, v in body.items() if v is not None})[1]
            if args.json:
                print(json.dumps(answer, indent=2), file=settings.out)
                return OK
            print(f"Planned #{answer['id']}: {answer['kind']} of {answer['accelerators']} {answer['flavor']} "
                  f"from {answer['starts_on']}", file=settings.out)  # fmt: skip
            return OK
        if args.action == "remove":
            client.call("DELETE", f"capacity-plan/{args.id}/")
            print(f"Removed #{args.id} from the plan.", file=settings.out)
            return OK
        found = list(client.rows("capacity-plan/"))
        if args.json:
            print(json.dumps(found, indent=2), file=settings.out)
            return OK
        if not found:
            print("Nothing planned: every forecast carries today's fleet forward.", file=settings.out)
            return OK
        rows = [["ID", "FROM", "CHANGE", "TYPE", "ACCELERATORS", "UNTIL", "NOTE"]]
        for row in found:
            sign = "-" if row["kind"] == "retirement" else "+"
            rows.append(
                [
                    str(row["id"]),
                    row["starts_on"],
                    row["kind"],
                    row["flavor"],
                    f"{sign}{row['accelerators']}",
                    row["ends_on"] or "",
                    row["note"],
                ]
            )
        self.lent.table(rows, settings.out)
        return OK


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm forecast`` and ``qm plan`` to ``qm``'s parser."""
    run = Commands(lent)
    forecast = command("forecast", run.forecast, "demand against capacity per accelerator type, backtested")
    forecast.add_argument("--horizon", choices=["12w", "6m"], default="12w", help="12 weeks or 6 months (weekly)")
    forecast.add_argument("--flavor", help="one accelerator type")
    forecast.add_argument("--teams", action="store_true", help="each team's part too")
    forecast.add_argument("--json", action="store_true", help="the API's answer as JSON")

    plan = command("plan", run.plan, "the capacity plan: orders, retirements, reserved commitments")
    plan.set_defaults(action="list")
    plan.add_argument("--json", action="store_true", help="the API's answer as JSON")
    actions = plan.add_subparsers(dest="action", metavar="ACTION")
    adding = actions.add_parser("add", help="plan an order (--ordered-on, --lead-days), retirement or commitment")
    adding.add_argument("kind", choices=["order", "retirement", "commitment"])
    adding.add_argument("flavor", help="the accelerator type")
    adding.add_argument("accelerators", type=int)
    adding.add_argument("--ordered-on", help="an order: YYYY-MM-DD")
    adding.add_argument("--lead-days", type=int, help="an order: days from ordering to service")
    adding.add_argument("--starts-on", help="a retirement or commitment: YYYY-MM-DD")
    adding.add_argument("--ends-on", help="a commitment's last day: YYYY-MM-DD")
    adding.add_argument("--note")
    adding.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="the API's answer as JSON")
    removing = actions.add_parser("remove", help="take a row out of the plan")
    removing.add_argument("id", type=int)
