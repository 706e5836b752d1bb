"""``qm costs``, ``qm budgets``, ``qm quotas`` and ``qm months``: Finance's and a lead's questions from a terminal,
through the same API (and so the same scoping and permissions) as the pages.

- ``qm costs [--month YYYY-MM] [--by team,project] [--team T]``: a month's costs grouped any way, with the
  fleet's figures for finance and admins, every amount in the organization's currency;
- ``qm budgets [--team T]``: each budget's limits and where they stand this month (money both as usage and as the
  full charge, whichever the budget counts);
- ``qm quotas [--team T]``: each queue's quota, use, borrowing and waiting work per accelerator type;
- ``qm months`` lists the months, open or closed, with their issued statements; ``qm months close YYYY-MM`` and
  ``qm months reopen YYYY-MM --reason ...`` (finance and admins).

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


def _money(value: str | None) -> str:
    """An amount as the pages show it: thousands grouped, to the cent."""
    return "-" if value is None or value == "" else f"{float(value):,.2f}"


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def _print_json(self, answer: Any, settings: Settings) -> int:
        print(json.dumps(answer, indent=2), file=settings.out)
        return OK

    def costs(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        query = {"month": args.month, "group_by": args.by, "team": args.team}
        answer = client.get("billing/costs/", {k: v for k, v in query.items() if v})
        if args.json:
            return self._print_json(answer, settings)
        by = answer["group_by"]
        rows = [[*(h.replace("_", " ").upper() for h in by), "ACC-HOURS", "USAGE", "IDLE", "OVERHEAD", "TOTAL"]]
        for row in answer["rows"]:
            keys = [str(row.get(f"{d}_name", row.get(d, ""))) for d in by]
            figures = [row["usage"], row["idle_share"], row["overhead_share"], row["total"]]
            rows.append([*keys, f"{float(row['accelerator_hours']):,.1f}", *map(_money, figures)])
        totals = answer["totals"]
        figures = [totals["usage"], totals["idle_share"], totals["overhead_share"], totals["total"]]
        rows.append(
            ["Total", *[""] * (len(by) - 1), f"{float(totals['accelerator_hours']):,.1f}", *map(_money, figures)]
        )
        print(f"Costs of {answer['month']} in {answer['currency']}", file=settings.out)
        self.lent.table(rows, settings.out)
        fleet = answer.get("fleet")
        if fleet:
            print(
                f"Fleet: total {_money(fleet['total'])} = capacity {_money(fleet['capacity_cost'])} + overhead "
                f"{_money(fleet['overhead'])}; unallocated {_money(fleet['unallocated_idle'])} idle, "
                f"{_money(fleet['unallocated_overhead'])} overhead",
                file=settings.out,
            )
        return OK

    def budgets(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        found = list(client.rows("budgets/", {"team": args.team} if args.team else None))
        if args.json:
            return self._print_json(found, settings)
        rows = [["FOR", "MEASURE", "LIMIT", "USED", "%", "COMMITTED", "FORECAST", "KIND", "BOTH"]]
        for budget in found:
            scope = f"{budget['team']}/{budget['project']}" if budget["project"] else budget["team"]
            for standing in budget["standings"]:
                money = standing["measure"] == "amount"
                measure = f"money ({budget['counts']}, {budget['currency']})" if money else "accelerator-hours"
                show = _money if money else (lambda v: "-" if v is None else f"{float(v):,.1f}")
                both = (
                    f"usage {_money(standing['usage'])}, charge {_money(standing['charge'])}"
                    if money and standing.get("charge") is not None
                    else ""
                )
                rows.append(
                    [
                        scope,
                        measure,
                        show(standing["limit"]),
                        show(standing["used"]),
                        f"{standing['percent']:.0f}",
                        show(standing["committed"]),
                        show(standing["forecast"]),
                        "hard" if budget["hard"] else "soft",
                        both,
                    ]
                )
        if len(rows) == 1:
            print("No budgets you may see.", file=settings.out)
            return OK
        self.lent.table(rows, settings.out)
        return OK

    def quotas(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        found = list(client.rows("queues/", {"team": args.team} if args.team else None))
        if args.json:
            return self._print_json(found, settings)
        rows = [["QUEUE", "FLAVOR", "RESOURCE", "QUOTA", "USED", "BORROWED", "LENT", "WAITING"]]
        for queue in found:
            for quota in queue["quotas"]:
                if quota["nominal"] is None and not float(quota["used"] or 0) and not float(quota["pending"] or 0):
                    continue
                figures = [quota["nominal"], quota["used"], quota["borrowed"], quota["lent"], quota["pending"]]
                rows.append(
                    [
                        queue["name"],
                        quota["flavor"],
                        quota["resource"],
                        *("-" if f is None else f"{float(f):g}" for f in figures),
                    ]
                )
        if len(rows) == 1:
            print("No quotas you may see.", file=settings.out)
            return OK
        self.lent.table(rows, settings.out)
        return OK

    def months(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        if args.action in ("close", "reopen"):
            body = {"month": args.month, **({"reason": args.reason} if args.action == "reopen" else {})}
            answer = client.call("POST", f"billing/periods/{args.action}/", body=body)[1]
            if args.json:
                return self._print_json(answer, settings)
            numbers = sorted({s["number"] for s in answer["statements"]})
            done = "closed" if args.action == "close" else "reopened"
            issued = f"; statements {', '.join(numbers)}" if numbers else ""
            print(f"{answer['month']} {done}{issued}", file=settings.out)
            return OK
        answer = client.get("billing/periods/")
        if args.json:
            return self._print_json(answer, settings)
        rows = [["MONTH", "STATE", "CLOSED", "STATEMENTS", "CORRECTIONS BOOKED"]]
        for period in answer["periods"]:
            closed = f"{self.lent.when(period['closed_at'])} by {period['closed_by']}" if period["closed_at"] else ""
            numbers = sorted({s["number"] for s in period["statements"]})
            rows.append(
                [period["month"], period["state"], closed, ", ".join(numbers), _money(period["corrections_booked"])]
            )
        self.lent.table(rows, settings.out)
        return OK


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm costs``, ``qm budgets``, ``qm quotas`` and ``qm months`` to ``qm``'s parser."""
    run = Commands(lent)
    costs = command("costs", run.costs, "a month's costs grouped any way (finance sees the fleet's figures too)")
    costs.add_argument("--month", help="YYYY-MM (default: this month, so far)")
    costs.add_argument("--by", help="day, team, project, user, cluster, flavor, capacity_type, corrects (default team)")
    costs.add_argument("--team", help="only this team (slug or id)")
    costs.add_argument("--json", action="store_true", help="the API's answer as JSON")

    budgets = command("budgets", run.budgets, "budgets and where they stand this month")
    budgets.add_argument("--team", help="only this team (slug or id)")
    budgets.add_argument("--json", action="store_true", help="the API's rows as JSON")

    quotas = command("quotas", run.quotas, "queues' quotas, use, borrowing and waiting work per accelerator type")
    quotas.add_argument("--team", help="only this team (slug or id)")
    quotas.add_argument("--json", action="store_true", help="the API's rows as JSON")

    months = command("months", run.months, "finance: months of costs, open or closed; close or reopen one")
    months.set_defaults(action="list")
    months.add_argument("--json", action="store_true", help="the API's answer as JSON")
    actions = months.add_subparsers(dest="action", metavar="ACTION")
    closing = actions.add_parser("close", help="close an ended month: freeze it and issue its statements")
    closing.add_argument("month", help="YYYY-MM")
    closing.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="the API's answer as JSON")
    reopening = actions.add_parser("reopen", help="reopen the latest closed month, saying why")
    reopening.add_argument("month", help="YYYY-MM")
    reopening.add_argument("--reason", required=True, help="why (kept in the audit log)")
    reopening.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="the API's answer as JSON")
