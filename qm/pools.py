"""``qm pools``: a cluster's elastic pools (docs/scheduling.md §Elastic pools), through
``/api/v1/clusters/{id}/elastic-pools/`` and ``elastic-grants/``.

- ``qm pools [list] --cluster C``: the pools, with this month's spend and what each budget has left;
- ``qm pools create --cluster C --name N --flavor TYPE --node-accelerators 8 --node-cpu CORES --node-memory GIB
  --max-nodes 4 [--min-nodes N] [--capacity-type T] [--lead-time 10m] [--idle-release 30m] [--monthly-budget M]``
  (admins);
- ``qm pools set --cluster C NAME [--enabled | --disabled] [--name NEW] [any field of create]`` (admins);
- ``qm pools grants --cluster C``: what the pools asked of the cloud, newest first.

A cluster is named by its slug or its id. ``qm.cli`` registers the command and lends it its table format, its times
and its error (``admin.Lent``).
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
CAPACITY_TYPES = ("on_demand", "spot", "reserved")
#: The options of ``create`` and ``set`` and the API's field each fills.
FIELDS = {
    "flavor": "flavor",
    "capacity_type": "capacity_type",
    "node_accelerators": "node_accelerators",
    "node_cpu": "node_cpu",
    "node_memory": "node_memory_gib",
    "min_nodes": "min_nodes",
    "max_nodes": "max_nodes",
    "lead_time": "lead_time",
    "idle_release": "idle_release",
    "monthly_budget": "monthly_budget",
}
REQUIRED = ("flavor", "node_accelerators", "node_cpu", "node_memory", "max_nodes")


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def cluster_id(self, client: Client, ref: str) -> int:
        """The id of the cluster ``ref`` names among those one sees: its slug (which wins), or its id."""
        clusters = list(client.rows("clusters/"))
        by_slug = [c for c in clusters if c["slug"] == ref]
        if len(by_slug) > 1:
            raise self.lent.error(f"more than one cluster is called {ref!r}: give its id")
        found = by_slug or [c for c in clusters if str(c["id"]) == ref]
        if not found:
            raise self.lent.error(f"no cluster {ref!r}, or not one you may see (qm clusters lists them)")
        return int(found[0]["id"])

    def pools(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        if not args.cluster:
            raise self.lent.error("name the cluster: qm pools --cluster SLUG")
        cluster = self.cluster_id(client, args.cluster)
        found = list(client.rows(f"clusters/{cluster}/elastic-pools/"))
        if args.json:
            print(json.dumps(found, indent=2), file=settings.out)
            return OK
        if not found:
            print(f"No elastic pools on {args.cluster}.", file=settings.out)
            return OK
        rows = [
            ["ID", "POOL", "STATE", "NODES", "EACH NODE", "CAPACITY", "UP AFTER", "IDLE", "BUDGET", "SPENT", "LEFT"]
        ]
        for p in found:
            rows.append(
                [
                    str(p["id"]),
                    p["name"],
                    "on" if p["enabled"] else "off",
                    f"{p['min_nodes']}-{p['max_nodes']}",
                    f"{p['node_accelerators']} {p['flavor']}, {p['node_cpu']} cores, {p['node_memory_gib']} GiB",
                    p["capacity_type"],
                    f"{p['lead_time']} s",
                    f"{p['idle_release']} s",
                    p["monthly_budget"] or "none",
                    p["spent_this_month"],
                    p["budget_left"] if p["budget_left"] is not None else "-",
                ]
            )
        self.lent.table(rows, settings.out)
        return OK

    def create(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        missing = [f"--{name.replace('_', '-')}" for name in REQUIRED if getattr(args, name) is None]
        if missing:
            raise self.lent.error(f"say {', '.join(missing)}: a pool needs its flavor, node shape and most nodes")
        cluster = self.cluster_id(client, args.cluster)
        body = {"name": args.name, **self._fields(args)}
        _, pool = client.call("POST", f"clusters/{cluster}/elastic-pools/", body=body)
        print(
            f"Elastic pool {pool['name']} added to {pool['cluster']}: up to {pool['max_nodes']} nodes of "
            f"{pool['node_accelerators']} {pool['flavor']} ({pool['capacity_type']}).",
            file=settings.out,
        )
        return OK

    def change(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        cluster = self.cluster_id(client, args.cluster)
        pools = list(client.rows(f"clusters/{cluster}/elastic-pools/"))
        found = [p for p in pools if p["name"] == args.pool] or [p for p in pools if str(p["id"]) == args.pool]
        if not found:
            raise self.lent.error(f"{args.cluster} has no elastic pool {args.pool!r} (qm pools --cluster lists them)")
        body = self._fields(args)
        if args.name is not None:
            body["name"] = args.name
        if args.enabled is not None:
            body["enabled"] = args.enabled
        if not body:
            raise self.lent.error("say what to change, e.g. --max-nodes 8 or --disabled")
        _, pool = client.call("PATCH", f"clusters/{cluster}/elastic-pools/{found[0]['id']}/", body=body)
        state = "on" if pool["enabled"] else "off (nothing more is asked of it)"
        print(f"Elastic pool {pool['name']} of {pool['cluster']} is saved; it is {state}.", file=settings.out)
        return OK

    def grants(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        cluster = self.cluster_id(client, args.cluster)
        found = list(client.rows(f"clusters/{cluster}/elastic-grants/"))
        if args.json:
            print(json.dumps(found, indent=2), file=settings.out)
            return OK
        if not found:
            print(f"Nothing asked of the cloud for {args.cluster}.", file=settings.out)
            return OK
        rows = [["ID", "ASKED", "POOL", "NODES", "STATE", "COST/H", "UP", "RELEASED", "JOBS", "MESSAGE"]]
        for g in found:
            nodes = f"{g['count']}" + (f" ({', '.join(g['nodes'])})" if g["nodes"] else "")
            rows.append(
                [
                    str(g["id"]),
                    self.lent.when(g["asked_at"]),
                    g["pool"],
                    nodes,
                    g["state"],
                    g["cost_per_hour"],
                    self.lent.when(g["up_at"]),
                    self.lent.when(g["released_at"]) if g["released_at"] else "-",
                    ", ".join(str(j) for j in g["jobs"]) if g["jobs"] is not None else "-",
                    g["message"].splitlines()[0] if g["message"] else "",
                ]
            )
        self.lent.table(rows, settings.out)
        return OK

    @staticmethod
    def _fields(args: argparse.Namespace) -> dict[str, Any]:
        body = {field: getattr(args, option) for option, field in FIELDS.items() if getattr(args, option) is not None}
        if str(body.get("monthly_budget", "")).strip().lower() == "none":
            body["monthly_budget"] = None  # no budget
        return body


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm pools`` to ``qm``'s parser, through its ``command(name, handler, help)``."""
    run = Commands(lent)
    pools = command("pools", run.pools, "a cluster's elastic pools: list (the default), create, set, grants")
    actions = pools.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="the pools, with this month's spend and what each budget has left")
    for parser, default in ((pools, None), (listing, argparse.SUPPRESS)):  # (either place; the first wins)
        parser.add_argument("--cluster", default=default, help="a cluster's slug or id")
        parser.add_argument("--json", action="store_true", default=default or False, help="the API's rows as JSON")

    creating = actions.add_parser("create", help="admins: add an elastic pool to a cluster")
    creating.set_defaults(handler=run.create)
    creating.add_argument("--cluster", required=True, help="a cluster's slug or id")
    creating.add_argument("--name", required=True, help="the pool's name, unique in the cluster (e.g. h100-spot)")
    _shape(creating)

    changing = actions.add_parser("set", help="admins: change a pool, or switch it off or on")
    changing.set_defaults(handler=run.change)
    changing.add_argument("pool", help="the pool's name (or id)")
    changing.add_argument("--cluster", required=True, help="a cluster's slug or id")
    changing.add_argument("--name", help="a new name")
    switch = changing.add_mutually_exclusive_group()
    switch.add_argument("--enabled", dest="enabled", action="store_const", const=True, help="switch it on")
    switch.add_argument(
        "--disabled",
        dest="enabled",
        action="store_const",
        const=False,
        help="switch it off: nothing more is asked of it; its nodes still go back once idle",
    )
    _shape(changing)

    granted = actions.add_parser("grants", help="what the pools asked of the cloud, newest first")
    granted.set_defaults(handler=run.grants)
    granted.add_argument("--cluster", required=True, help="a cluster's slug or id")
    granted.add_argument("--json", action="store_true", help="the API's rows as JSON")


def _shape(parser: argparse.ArgumentParser) -> None:
    """The options of a pool's fields, for ``create`` and ``set``."""
    parser.add_argument("--flavor", help="the accelerator type, e.g. H100-SXM-80GB")
    parser.add_argument("--node-accelerators", type=int, help="accelerators each node has")
    parser.add_argument("--node-cpu", help="cores each node offers to jobs (e.g. 110)")
    parser.add_argument("--node-memory", help="GiB each node offers to jobs (e.g. 1900)")
    parser.add_argument("--min-nodes", type=int, help="nodes it keeps once up (default 0)")
    parser.add_argument("--max-nodes", type=int, help="the most nodes it may have")
    parser.add_argument("--capacity-type", choices=CAPACITY_TYPES, help="how its nodes are paid (default on_demand)")
    parser.add_argument("--lead-time", type=seconds, help="from asking to a node in service, e.g. 10m (default)")
    parser.add_argument("--idle-release", type=seconds, help="how long a node stays idle before it goes (default 30m)")
    parser.add_argument("--monthly-budget", help="a month's budget in the price book's currency; none: no budget")
