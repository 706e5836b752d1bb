"""``qm`` commands for admins and on-call: the clusters, their nodes, cordon, drain and resume a node, and
maintenance windows (list, plan, cancel), through the fleet API (``/api/v1/clusters/``, ``nodes/``,
``maintenance-windows/``; docs/operations.md §Automating on-call with the API).

A node is named ``<cluster>/<node name>`` (``east/h100-00003``), by its name alone when no other cluster has a
node of that name, or by its id. Durations are seconds or a number with a unit: ``90s``, ``10m``, ``2h``, ``1d``.

``qm.cli`` registers these commands and lends them its table and time formats and its error (``Lent``): it
imports this module, so this module cannot import it back (the build refuses import cycles).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from qm.client import Client, Settings

OK = 0
DURATION = re.compile(r"([0-9]{1,9})([smhd]?)", re.IGNORECASE)
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Lent:
    """What ``qm.cli`` lends these commands."""

    table: Callable[[Sequence[Sequence[str]], TextIO], None]
    when: Callable[[str | None], str]
    #: ``CliError``: raised with a message, it is printed and ``qm`` exits 1.
    error: Callable[[str], Exception]


def seconds(text: str) -> int:
    """``--grace``: seconds, or a number with a unit (``10m``)."""
    match = DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give seconds, or e.g. 90s, 10m, 2h, 1d")
    return int(match.group(1)) * UNIT_SECONDS[match.group(2).lower()]


def minutes(text: str) -> int:
    """``--drain-ahead``: a duration in whole minutes (``60m``, ``2h``; a bare number is minutes)."""
    if text.strip().isdigit():
        return int(text)
    total = seconds(text)
    if total % 60:
        raise argparse.ArgumentTypeError(f"{text!r} is not whole minutes")
    return total // 60


def _nodes_word(count: int) -> str:
    return f"{count} node" + ("" if count == 1 else "s")


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    # --- reading ---------------------------------------------------------------------------------------------

    def clusters(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        clusters = list(client.rows("clusters/"))
        if args.json:
            print(json.dumps(clusters, indent=2), file=settings.out)
            return OK
        if not clusters:
            print("No clusters.", file=settings.out)
            return OK
        rows = [["ID", "SLUG", "KIND", "STATUS", "NODES", "ACCELERATORS", "RUNS", "LAST SYNC"]]
        for c in clusters:
            out_of_service = {s: n for s, n in c["nodes"]["by_state"].items() if s != "schedulable"}
            nodes = str(c["nodes"]["total"])
            if out_of_service:
                nodes += " (" + ", ".join(f"{n} {s}" for s, n in sorted(out_of_service.items())) + ")"
            accelerators = f"{c['accelerators']['used']}/{c['accelerators']['total']} used"
            rows.append(
                [
                    str(c["id"]),
                    c["slug"],
                    c["kind"],
                    c["status"],
                    nodes,
                    accelerators,
                    ", ".join(c["capabilities"]["runs"]),
                    self.lent.when(c["last_sync_at"]),
                ]
            )
        self.lent.table(rows, settings.out)
        return OK

    def nodes(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        query = {"cluster": args.cluster, "state": args.state, "healthy": "false" if args.unhealthy else None}
        nodes = list(client.rows("nodes/", {k: v for k, v in query.items() if v}))
        if args.json:
            print(json.dumps(nodes, indent=2), file=settings.out)
            return OK
        if not nodes:
            print("No nodes.", file=settings.out)
            return OK
        rows = [["ID", "NODE", "STATE", "HEALTH", "ACCELERATORS", "NOTE"]]
        for n in nodes:
            health = "healthy" if n["healthy"] and n["ready"] else ("not ready" if n["healthy"] else "failing")
            used = f"{n['accelerators_used']}/{n['accelerators']} {n['accelerator'] or ''}".rstrip()
            rows.append([str(n["id"]), f"{n['cluster']}/{n['name']}", n["state"], health, used, note(n["open_drain"])])
        self.lent.table(rows, settings.out)
        return OK

    # --- cordon, drain, resume -----------------------------------------------------------------------------------

    def node_id(self, client: Client, ref: str) -> int:
        """The id of the node ``ref`` names: ``<cluster>/<name>``, a name no other cluster has, or an id."""
        if ref.isdigit():
            return int(ref)
        cluster, _, name = ref.rpartition("/")
        query = {"q": name, **({"cluster": cluster} if cluster else {})}
        found = [n for n in client.rows("nodes/", query) if n["name"] == name]
        if not found:
            where = f" in cluster {cluster}" if cluster else ""
            raise self.lent.error(f"No node {name!r}{where}, or not one you may see.")
        if len(found) > 1:
            places = ", ".join(f"{n['cluster']}/{n['name']}" for n in found)
            raise self.lent.error(f"Several nodes are named {name!r}: say which, as {places}.")
        return int(found[0]["id"])

    def change_node(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        """``cordon``, ``drain`` or ``resume`` (the command's name is the endpoint's) a node, with a reason."""
        node_id = self.node_id(client, args.node)
        body: dict[str, Any] = {"reason": args.reason}
        if getattr(args, "grace", None) is not None:
            body["grace_seconds"] = args.grace
        _, node = client.call("POST", f"nodes/{node_id}/{args.command}/", body=body)
        drain = node["open_drain"]
        grace = ""
        if drain and drain["kind"] == "drain":
            grace = (
                f"; jobs get {drain['grace_seconds']} s"
                if drain["grace_seconds"] is not None
                else "; jobs get their tier's grace"
            )
        print(f"Node {node['cluster']}/{node['name']}: {node['state']}{grace}.", file=settings.out)
        return OK

    # --- maintenance ---------------------------------------------------------------------------------------------

    def maintenance(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        query = {"cluster": args.cluster, "ended": None if args.all else "false"}
        windows = list(client.rows("maintenance-windows/", {k: v for k, v in query.items() if v}))
        if args.json:
            print(json.dumps(windows, indent=2), file=settings.out)
            return OK
        if not windows:
            print("No maintenance windows." if args.all else "No maintenance planned.", file=settings.out)
            return OK
        rows = [["ID", "CLUSTER", "STARTS", "ENDS", "DRAINS FROM", "NODES", "REASON"]]
        for w in windows:
            rows.append(
                [
                    str(w["id"]),
                    w["cluster"],
                    self.lent.when(w["starts_at"]),
                    self.lent.when(w["ends_at"]),
                    self.lent.when(w["drains_from"]),
                    ", ".join(w["nodes"]) or "all",
                    w["reason"].splitlines()[0] if w["reason"] else "",
                ]
            )
        self.lent.table(rows, settings.out)
        return OK

    def plan(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        body: dict[str, Any] = {
            "cluster": args.cluster,
            "starts_at": args.start,
            "ends_at": args.end,
            "reason": args.reason,
            "nodes": [name.strip() for name in (args.nodes or "").split(",") if name.strip()],
        }
        if args.drain_ahead is not None:
            body["drain_ahead_minutes"] = args.drain_ahead
        _, window = client.call("POST", "maintenance-windows/", body=body)
        nodes = _nodes_word(len(window["nodes"])) if window["nodes"] else "every node"
        print(
            f"Maintenance window {window['id']} on {window['cluster']}: {self.lent.when(window['starts_at'])} to "
            f"{self.lent.when(window['ends_at'])}; {nodes} drained from {self.lent.when(window['drains_from'])}.",
            file=settings.out,
        )
        return OK

    def cancel(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        client.call("DELETE", f"maintenance-windows/{args.id}/")
        print(f"Maintenance window {args.id} is cancelled; the nodes drained for it are resumed.", file=settings.out)
        return OK


def note(drain: Mapping[str, Any] | None) -> str:
    """What a node list row says of the drain or cordon holding the node out: by whom, and why."""
    if not drain:
        return ""
    who = "auto-drain" if drain["automatic"] else (drain["requested_by"] or "(deleted user)")
    grace = f", grace {drain['grace_seconds']} s" if drain["grace_seconds"] is not None else ""
    return f"{drain['kind']} by {who}{grace}: {drain['reason'].splitlines()[0] if drain['reason'] else ''}"


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add the admin commands to ``qm``'s parser, through its ``command(name, handler, help)``."""
    run = Commands(lent)
    clusters = command("clusters", run.clusters, "the clusters: status, nodes by state, accelerators, what they run")
    clusters.add_argument("--json", action="store_true", help="the API's rows as JSON")

    nodes = command("nodes", run.nodes, "nodes, with what holds them out of service")
    nodes.add_argument("--cluster", help="a cluster's slug or id")
    nodes.add_argument("--state", help="schedulable, cordoned, draining, drained or down")
    nodes.add_argument("--unhealthy", action="store_true", help="only nodes failing health checks")
    nodes.add_argument("--json", action="store_true", help="the API's rows as JSON")

    reason = "why (kept in the audit log, shown to the people whose jobs this moves)"
    node = "<cluster>/<node name>, a node name, or an id"
    cordon = command("cordon", run.change_node, "admins: no new work on a node; running jobs finish")
    cordon.add_argument("node", help=node)
    cordon.add_argument("--reason", required=True, help=reason)
    drain = command(
        "drain", run.change_node, "admins: move a node's jobs off it: each is signalled and gets its grace first"
    )
    drain.add_argument("node", help=node)
    drain.add_argument("--reason", required=True, help=reason)
    drain.add_argument(
        "--grace", type=seconds, help="how long jobs get to checkpoint (e.g. 10m; default: their tier's)"
    )
    resume = command("resume", run.change_node, "admins: put a cordoned or drained node back in service")
    resume.add_argument("node", help=node)
    resume.add_argument("--reason", required=True, help=reason)

    maintenance = command("maintenance", run.maintenance, "maintenance windows: list (the default), plan, cancel")
    windows = maintenance.add_subparsers(dest="action", metavar="ACTION")
    listing = windows.add_parser("list", help="windows not over yet, soonest first")
    for parser, default in ((maintenance, None), (listing, argparse.SUPPRESS)):  # (either place; the first wins)
        parser.add_argument("--cluster", default=default, help="a cluster's slug or id")
        parser.add_argument("--all", action="store_true", default=default or False, help="past windows too")
        parser.add_argument("--json", action="store_true", default=default or False, help="the API's rows as JSON")
    planning = windows.add_parser("plan", help="admins: plan a window; its nodes are drained ahead of it")
    planning.set_defaults(handler=run.plan)
    planning.add_argument("--cluster", required=True, help="a cluster's slug or id")
    planning.add_argument("--start", required=True, help="ISO 8601, e.g. 2026-12-01T06:00Z (UTC without an offset)")
    planning.add_argument("--end", required=True, help="ISO 8601")
    planning.add_argument("--reason", required=True, help="why (shown to the people whose jobs move)")
    planning.add_argument("--nodes", help="node names, comma-separated (default: every node of the cluster)")
    planning.add_argument("--drain-ahead", type=minutes, help="how long before the start to drain (default 60m)")
    cancelling = windows.add_parser("cancel", help="admins: cancel a window; its drained nodes are resumed")
    cancelling.set_defaults(handler=run.cancel)
    cancelling.add_argument("id", type=int)
