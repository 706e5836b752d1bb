"""``qm queues`` and ``qm fair-share``: where each queue stands in fair sharing, and how the organization's fair
sharing remembers use (docs/scheduling.md §Fair sharing), through ``/api/v1/queues/`` and ``/api/v1/fair-share/``.

``qm queues`` lists the queues one may see, first placed first: the share the next cycle compares, what it
borrows now, what its recent use adds, its recent accelerator-hours and its part of the use of the queues beside
it against its fair part; ``qm queues NAME`` says why in words. ``qm fair-share`` prints the setting; an admin
changes it with ``--half-life`` and ``--usage-weight`` and a ``--reason``.

``qm.cli`` registers these commands and lends them its table format and its error (``admin.Lent``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from qm.admin import Lent, seconds

if TYPE_CHECKING:
    from qm.client import Client, Settings

OK = 0


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _half_life(value: int) -> str:
    days = value / 86400
    return f"{days:g} d" if days >= 1 else f"{value / 3600:g} h"


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def queues(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        queues = list(client.rows("queues/"))
        if args.name:
            queues = [q for q in queues if q["name"] == args.name]
            if not queues:
                raise self.lent.error(f"no queue {args.name!r} that you may see")
        if args.json:
            print(json.dumps(queues, indent=2), file=settings.out)
            return OK
        if not queues:
            print("No queues.", file=settings.out)
            return OK
        if args.name:
            queue = queues[0]
            standing = queue["fair_share"]
            print(f"Queue {queue['name']} (team {queue['team']})", file=settings.out)
            print(standing["why"] if standing else "Not in the quota tree yet.", file=settings.out)
            return OK
        ranked = sorted(queues, key=lambda q: (q["fair_share"] or {}).get("rank", 10**9))
        rows = [["QUEUE", "TEAM", "RANK", "SHARE", "BORROWING", "RECENT USE", "ACCEL-HOURS", "PART", "FAIR PART"]]
        for q in ranked:
            s: dict[str, Any] = q["fair_share"] or {}
            rows.append(
                [
                    q["name"],
                    q["team"],
                    f"{s['rank']}/{s['of']}" if s else "-",
                    f"{s['share']:.0f}" if s else "-",
                    f"{s['borrowing']:.0f}" if s else "-",
                    f"{s['memory']:+.0f}" if s else "-",
                    f"{s['recent_accelerator_hours']:.1f}" if s else "-",
                    _percent(s.get("portion")),
                    _percent(s.get("entitlement")),
                ]
            )
        self.lent.table(rows, settings.out)
        print("Lower shares go first among jobs of one tier; qm queues NAME says why.", file=settings.out)
        return OK

    def fair_share(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        body = {k: v for k, v in (("half_life", args.half_life), ("usage_weight", args.usage_weight)) if v is not None}
        if body:
            if not args.reason:
                raise self.lent.error("say why with --reason: it is kept in the quota history")
            if args.organization:
                body["organization"] = args.organization
            client.call("POST", "fair-share/", body={**body, "reason": args.reason})
        settings_rows = client.get("fair-share/")
        if args.json:
            print(json.dumps(settings_rows, indent=2), file=settings.out)
            return OK
        rows = [["ORGANIZATION", "HALF-LIFE", "WEIGHT OF RECENT USE"]]
        rows += [[s["organization"], _half_life(s["half_life"]), f"{s['usage_weight']:g}"] for s in settings_rows]
        self.lent.table(rows, settings.out)
        return OK


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm queues`` and ``qm fair-share`` to ``qm``'s parser, through its ``command(name, handler, help)``."""
    run = Commands(lent)
    queues = command("queues", run.queues, "queues in fair-sharing order: share, recent use, fair part")
    queues.add_argument("name", nargs="?", help="a queue's name: why it ranks where it does")
    queues.add_argument("--json", action="store_true", help="the API's rows as JSON")
    fair = command("fair-share", run.fair_share, "how fair sharing remembers use (admins change it)")
    fair.add_argument("--half-life", type=seconds, help="e.g. 7d or 12h: after it, an hour of use counts half")
    fair.add_argument("--usage-weight", type=float, help="how much recent use counts in the share (0: it forgets)")
    fair.add_argument("--organization", help="its slug, if you belong to several")
    fair.add_argument("--reason", help="why (kept in the quota history and the audit log)")
    fair.add_argument("--json", action="store_true", help="the API's answer as JSON")
