"""``qm capacity``: capacity requests (docs/scheduling.md §Bookings), through ``/api/v1/capacity-requests/``.

- ``qm capacity`` lists the requests one may see (a lead: the team's; an admin: every team's), ``--state`` picks;
- ``qm capacity reserve TEAM --flavor F --accelerators N --from T --to T --reason ...``: a reservation for a window;
- ``qm capacity quota TEAM --flavor F --accelerators N [--from T] [--until T] --reason ...``: more quota, for good
  or until a date;
- ``qm capacity approve ID --reason ... [--cluster C]`` and ``qm capacity refuse ID --reason ...`` (admins);
- ``qm capacity withdraw ID --reason ...`` (the team's leads).

``qm.cli`` registers the command and lends it its table format, its times and its error (``admin.Lent``).
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
STATES = ("pending", "approved", "refused", "withdrawn", "ended")


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def capacity(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        action = args.action
        if action in ("reserve", "quota"):
            return self._ask(args, settings, client)
        if action in ("approve", "refuse", "withdraw"):
            return self._decide(args, settings, client)
        if args.target:
            raise self.lent.error(f"unknown action {action!r}: list, reserve, quota, approve, refuse or withdraw")
        params = {"state": args.state} if args.state else None
        found = list(client.rows("capacity-requests/", params))
        if args.json:
            print(json.dumps(found, indent=2), file=settings.out)
            return OK
        if not found:
            print("No capacity requests.", file=settings.out)
            return OK
        rows = [["ID", "TEAM", "KIND", "ACCELERATORS", "FROM", "TO", "STATE", "NODES", "WHY"]]
        for r in found:
            rows.append(
                [
                    str(r["id"]),
                    r["team"],
                    r["kind"],
                    f"{r['accelerators']} {r['flavor']}",
                    self.lent.when(r["starts_at"]),
                    self.lent.when(r["ends_at"]) if r["ends_at"] else "for good",
                    r["state"],
                    f"{r['cluster']}: {', '.join(r['nodes'])}" if r["nodes"] else "-",
                    r["decision"] or r["reason"],
                ]
            )
        self.lent.table(rows, settings.out)
        return OK

    def _ask(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        if not args.target:
            raise self.lent.error(f"name the team: qm capacity {args.action} TEAM ...")
        if args.flavor is None or args.accelerators is None:
            raise self.lent.error("say what with --flavor and --accelerators")
        if not args.reason:
            raise self.lent.error("say why with --reason: the admin who decides reads it")
        body: dict[str, Any] = {
            "team": args.target,
            "kind": "reservation" if args.action == "reserve" else "quota",
            "flavor": args.flavor,
            "accelerators": args.accelerators,
            "reason": args.reason,
        }
        if args.start:
            body["starts_at"] = args.start
        if args.end:
            body["ends_at"] = args.end
        _, made = client.call("POST", "capacity-requests/", body=body)
        print(f"Asked: request {made['id']}, waiting for an organization admin's decision.", file=settings.out)
        return OK

    def _decide(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        if not args.target or not args.target.isdigit():
            raise self.lent.error(f"give the request's id: qm capacity {args.action} ID --reason ...")
        if not args.reason:
            raise self.lent.error("say why with --reason: the team reads it")
        if args.action == "withdraw":
            _, done = client.call("POST", f"capacity-requests/{args.target}/withdraw/", body={"reason": args.reason})
        else:
            body: dict[str, Any] = {"approve": args.action == "approve", "reason": args.reason}
            if args.cluster:
                body["cluster"] = args.cluster
            _, done = client.call("POST", f"capacity-requests/{args.target}/decide/", body=body)
        booked = f" on {done['cluster']}: {', '.join(done['nodes'])}" if done.get("nodes") else ""
        print(f"Request {done['id']} is {done['state']}{booked}.", file=settings.out)
        return OK


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm capacity`` to ``qm``'s parser, through its ``command(name, handler, help)``."""
    run = Commands(lent)
    cap = command("capacity", run.capacity, "capacity requests: reservations for deadlines and more quota")
    cap.add_argument(
        "action",
        nargs="?",
        default="list",
        choices=("list", "reserve", "quota", "approve", "refuse", "withdraw"),
        help="list (the default); reserve or quota TEAM; approve, refuse or withdraw ID",
    )
    cap.add_argument("target", nargs="?", help="the team (reserve, quota) or the request's id")
    cap.add_argument("--flavor", help="the accelerator type, e.g. H100-SXM-80GB")
    cap.add_argument("--accelerators", type=int, help="how many")
    cap.add_argument("--from", dest="start", help="when it starts (ISO 8601; more quota: default now)")
    cap.add_argument("--to", "--until", dest="end", help="when it ends (ISO 8601; more quota without it: for good)")
    cap.add_argument("--cluster", help="approve: the cluster to book a reservation on (default: where it fits best)")
    cap.add_argument("--state", choices=STATES, help="list: only requests in this state")
    cap.add_argument("--reason", help="why (the decider or the team reads it; kept in the audit log)")
    cap.add_argument("--json", action="store_true", help="the API's rows as JSON")
