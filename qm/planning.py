"""``qm forecast`` and ``qm plan``: Procurement's questions from a terminal, through the same API (and so the same
scoping and permissions: finance, procurement and admins) as the capacity pages.

- ``qm forecast [--horizon 12w|6m] [--flavor F] [--teams]``: per accelerator type, how far the forecast can be
  trusted (in words), its backtest at 1, 4 and 12 weeks beside repeating the last week, and its weeks against
  capacity (the weeks demand may pass it marked); ``--teams`` adds each team's part;
- ``qm plan`` lists the capacity plan; ``qm plan add order|retirement|commitment ...`` and ``qm plan remove ID``
  change it;
- ``qm whatif compare "buy 4 H100 in onprem" "burst cloud-burst" ... [--days 30] [--seeds 1] [--wait]`` asks for a
  study of those options side by side (one replay each and seed, run in parallel); ``qm whatif show ID`` prints a
  study's table (cost, extra cost, waits, utilisation, waiting saved, cost per hour of waiting saved).

``--json`` prints the API's answer instead. ``qm.cli`` registers the commands and lends them its table format and
its error (``admin.Lent``).
"""

from __future__ import annotations

import argparse
import json
import sys
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


def _wait(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def _amount(value: str | None) -> str:
    return "-" if value is None else f"{float(value):,.2f}"


class Studies:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def whatif(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        if args.action == "compare":
            body = {"name": args.name or "; ".join(args.options)[:120], "days": args.days, "seeds": args.seeds}
            study = client.call("POST", "what-if-studies/", body={**body, "options": args.options})[1]
            print(f"Study #{study['id']}: {study['table']['total']} what-ifs queued.", file=sys.stderr)
            if not args.wait:
                return self._print(study, args, settings)
            while not study["table"]["complete"]:
                args.sleep(2)
                study = client.get(f"what-if-studies/{study['id']}/")
            return self._print(study, args, settings)
        return self._print(client.get(f"what-if-studies/{args.id}/"), args, settings)

    def _print(self, study: dict[str, Any], args: argparse.Namespace, settings: Settings) -> int:
        if args.json:
            print(json.dumps(study, indent=2), file=settings.out)
            return OK
        table = study["table"]
        print(f"{study['name']}: the last {study['days']} days, amounts in {table['currency']}", file=settings.out)
        rows = [["OPTION", "COST", "EXTRA", "MEAN WAIT", "P95 WAIT", "USE", "SAVED", "PER HOUR SAVED"]]
        for row in table["rows"]:
            use = "-" if row["utilisation"] is None else f"{row['utilisation'] * 100:.1f}%"
            saved = "" if row["wait_hours_saved"] is None else f"{row['wait_hours_saved']:,.1f} h"
            rows.append(
                [
                    row["label"],
                    _amount(row["cost"]),
                    "" if row["extra_cost"] is None else _amount(row["extra_cost"]),
                    _wait(row["mean_wait_s"]),
                    _wait(row["p95_wait_s"]),
                    use,
                    saved,
                    _amount(row["cost_per_wait_hour_saved"]) if row["cost_per_wait_hour_saved"] else "-",
                ]
            )
        self.lent.table(rows, settings.out)
        if not table["complete"]:
            print(f"{table['done']} of {table['total']} replays done so far.", file=settings.out)
        return OK


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm forecast``, ``qm plan`` and ``qm whatif`` to ``qm``'s parser."""
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

    studies = Studies(lent)
    whatif = command("whatif", studies.whatif, "buy or burst: capacity options replayed side by side, priced")
    whatif.add_argument("--json", action="store_true", help="the API's answer as JSON")
    steps = whatif.add_subparsers(dest="action", metavar="ACTION", required=True)
    compare = steps.add_parser("compare", help='compare options, e.g. "buy 4 H100 in onprem" "burst cloud-burst"')
    compare.add_argument("options", nargs="+", help="one option each: buy|retire|reserve N TYPE in CLUSTER, burst POOL")
    compare.add_argument("--name", help="what the study compares (default: the options)")
    compare.add_argument("--days", type=int, default=30, help="days of history replayed")
    compare.add_argument("--seeds", type=int, default=1, help="1: the history as it was; more: resampled too")
    compare.add_argument("--wait", action="store_true", help="follow it until every replay is done")
    compare.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="the API's answer as JSON")
    show = steps.add_parser("show", help="a study's table")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="the API's answer as JSON")
