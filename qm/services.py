"""``qm service``: inference services (docs/services.md, docs/service-tools.md) through ``/api/v1/services/``.

``qm service create NAME --image ... --command '...' [--min 1 --max 4 --target 20 ...]`` makes one;
``list``, ``show``, ``update`` (a change of the program rolls out a new revision), ``scale``, ``stop``,
``start``, ``rollback`` and ``url`` (the stable endpoint, with a curl example) read and change it. A service
is named by its id or its name (``team/name`` where several teams have one of that name). Bad input is the
server's 400, printed field by field by ``qm``.

``qm.cli`` registers these commands and lends them its table and time formats and its error (``admin.Lent``).
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
#: Options shared by create and update: (flag, the API's field, type, help).
PROGRAM = (
    ("--image", "image", str, "the container image"),
    ("--command", "command", str, "the command line, e.g. 'python3 deploy/model_server.py --port $PORT'"),
    ("--port", "port", int, "the port it serves on (0: it takes $PORT)"),
    ("--health-path", "health_path", str, "the path probed for a 200 (default /)"),
    ("--accelerators", "accelerators", int, "accelerators per replica"),
    ("--cpu", "cpu", float, "cores per replica"),
    ("--memory-gib", "memory_gib", float, "GiB per replica"),
    ("--model-version", "model_version", int, "a registry model version's id (QM_MODEL_PATH in the replica)"),
    ("--tier", "tier", str, "a priority tier's name"),
)
SCALING = (
    ("--min", "min_replicas", int, "the fewest replicas (0: it may scale to zero)"),
    ("--max", "max_replicas", int, "the most replicas"),
    ("--metric", "metric", str, "what it scales on: rps, inflight or gpu"),
    ("--target", "target", float, "the metric's value per replica"),
    ("--scale-to-zero-after", "scale_to_zero_after", int, "idle seconds before the last replica stops"),
    ("--scale-up-window", "scale_up_window", int, "seconds"),
    ("--scale-down-window", "scale_down_window", int, "seconds"),
)

#: Its own limits at the data plane; 0 gives it the data plane's again.
LIMITS = (
    ("--max-inflight", "max_inflight", int, "its requests at its replicas at once (0: the data plane's limit)"),
    ("--max-rps", "max_rps", int, "its requests a second (0: the data plane's limit, if any)"),
)


def _add(parser: argparse.ArgumentParser, options: tuple[tuple[str, str, type, str], ...]) -> None:
    for flag, field, kind, text in options:
        parser.add_argument(flag, dest=field, type=kind, help=text)


def _body(args: argparse.Namespace, options: tuple[tuple[str, str, type, str], ...]) -> dict[str, Any]:
    return {field: getattr(args, field) for _, field, _, _ in options if getattr(args, field, None) is not None}


def _env(pairs: list[str] | None, error: Callable[[str], Exception]) -> dict[str, str] | None:
    if not pairs:
        return None
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise error(f"--env takes NAME=VALUE, not {pair!r}.")
        env[name] = value
    return env


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def service(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        handler: Callable[[argparse.Namespace, Settings, Client], int] = getattr(self, f"do_{args.action}")
        return handler(args, settings, client)

    def _find(self, client: Client, ref: str) -> dict[str, Any]:
        if ref.isdigit():
            found: dict[str, Any] = client.get(f"services/{ref}/")
            return found
        team, _, name = ref.rpartition("/")
        matches: list[dict[str, Any]] = [
            s
            for page in client.pages("services/")
            for s in page["results"]
            if s["name"] == name and team in ("", s["team"])
        ]
        if not matches:
            raise self.lent.error(f"No service {ref!r}, or not one you may see.")
        if len(matches) > 1:
            teams = ", ".join(f"{s['team']}/{s['name']}" for s in matches)
            raise self.lent.error(f"Several services are named {name!r}: say which ({teams}).")
        return matches[0]

    def _program(self, args: argparse.Namespace) -> dict[str, Any]:
        body = _body(args, PROGRAM)
        if (env := _env(args.env, self.lent.error)) is not None:
            body["env"] = env
        if args.cluster:
            body["clusters"] = args.cluster
        if args.public is not None:
            body["public"] = args.public
        body.update({field: value or None for field, value in _body(args, LIMITS).items()})
        return body

    def do_create(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        body: dict[str, Any] = {"name": args.name, **self._program(args), **_body(args, SCALING)}
        if args.team:
            body["team"] = args.team
        if args.project:
            body["project"] = args.project
        _, service = client.call("POST", "services/", body=body)
        print(
            f"Created service {service['id']} ({service['team']}/{service['name']}): {service['endpoint']}",
            file=settings.out,
        )
        return OK

    def do_list(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        services = [s for page in client.pages("services/") for s in page["results"]]
        if args.json:
            print(json.dumps(services, indent=2), file=settings.out)
            return OK
        rows = [["ID", "TEAM", "NAME", "STATE", "REPLICAS", "RPS", "P95 MS", "COST/H", "REVISION"]]
        for s in services:
            rows.append(
                [
                    str(s["id"]),
                    s["team"],
                    s["name"],
                    s["state"],
                    f"{s['replicas_ready']}/{s['desired_replicas']}",
                    "-" if s["rps"] is None else f"{s['rps']:.1f}",
                    "-" if s["p95_ms"] is None else f"{s['p95_ms']:.0f}",
                    s["cost_per_hour"],
                    str(s["revision"]["number"]) if s["revision"] else "-",
                ]
            )
        self.lent.table(rows, settings.out)
        return OK

    def do_show(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        service = self._find(client, args.service)
        out = settings.out
        if args.json:
            print(json.dumps(service, indent=2), file=out)
            return OK
        revision = service["revision"] or {}
        print(f"Service {service['id']}: {service['team']}/{service['name']} ({service['state']})", file=out)
        print(f"  endpoint: {service['endpoint']}{' (public)' if service['public'] else ''}", file=out)
        print(
            f"  replicas: {service['replicas_ready']} ready of {service['desired_replicas']} desired "
            f"(min {service['min_replicas']}, max {service['max_replicas']}; "
            f"{service['metric']} target {service['target']} per replica)",
            file=out,
        )
        print(f"  cost: {service['cost_per_hour']} per hour", file=out)
        command = " ".join(revision.get("command") or [])
        size = f"{revision.get('cpu')} cores, {revision.get('memory_gib')} GiB"
        print(
            f"  revision {revision.get('number')}: {revision.get('image') or '(no image)'} {command} ({size})", file=out
        )
        if service["message"]:
            print(f"  note: {service['message']}", file=out)
        rows = [["REVISION", "STATE", "REASON"]]
        rows += [[str(r["number"]), r["state"], r["reason"] or ""] for r in service["revisions"]]
        self.lent.table(rows, out)
        replicas = client.get(f"services/{service['id']}/replicas/")
        if replicas:
            rows = [["REPLICA", "REVISION", "STATE", "CLUSTER", "NODES", "SINCE"]]
            for r in replicas:
                rows.append(
                    [
                        str(r["id"]),
                        str(r["revision"]),
                        r["state"],
                        r["cluster"] or "-",
                        ",".join(r["nodes"]) or "-",
                        self.lent.when(r["since"]),
                    ]
                )
            self.lent.table(rows, out)
        return OK

    def do_update(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        service = self._find(client, args.service)
        body = {**self._program(args), **_body(args, SCALING)}
        if not body:
            raise self.lent.error("Say what to change (qm service update --help).")
        _, changed = client.call("PATCH", f"services/{service['id']}/", body=body)
        latest = changed["revisions"][0] if changed["revisions"] else None
        what = f"; rolling out revision {latest['number']}" if latest and latest["state"] == "rolling_out" else ""
        print(f"Updated service {changed['id']} ({changed['name']}){what}.", file=settings.out)
        return OK

    def do_scale(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        service = self._find(client, args.service)
        _, changed = client.call("POST", f"services/{service['id']}/scale/", body=_body(args, SCALING))
        print(
            f"Service {changed['name']} scales between {changed['min_replicas']} and {changed['max_replicas']} "
            f"replicas ({changed['metric']} target {changed['target']} per replica).",
            file=settings.out,
        )
        return OK

    def _state(self, args: argparse.Namespace, settings: Settings, client: Client, verb: str) -> int:
        service = self._find(client, args.service)
        _, changed = client.call("POST", f"services/{service['id']}/{args.action}/")
        print(f"{verb} service {changed['name']}: {changed['state']}.", file=settings.out)
        return OK

    def do_stop(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        return self._state(args, settings, client, "Stopped")

    def do_start(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        return self._state(args, settings, client, "Started")

    def do_rollback(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        service = self._find(client, args.service)
        _, changed = client.call("POST", f"services/{service['id']}/rollback/")
        latest = changed["revisions"][0] if changed["revisions"] else {}
        print(
            f"Rolled back service {changed['name']}: revision {latest.get('number')} {latest.get('state')}.",
            file=settings.out,
        )
        return OK

    def do_url(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        service = self._find(client, args.service)
        print(service["endpoint"], file=settings.out)
        if args.curl:
            auth = "" if service["public"] else ' -H "Authorization: Bearer $QM_TOKEN"'
            print(f"curl{auth} -d '{{\"input\": [1, 2]}}' {service['endpoint']}v1/predict", file=settings.out)
        return OK


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm service`` to ``qm``'s parser, through its ``command(name, handler, help)``."""
    run = Commands(lent)
    service = command("service", run.service, "inference services: create, list, show, update, scale, stop, start")
    actions = service.add_subparsers(dest="action", required=True, metavar="ACTION")

    def program(parser: argparse.ArgumentParser) -> None:
        _add(parser, PROGRAM)
        _add(parser, LIMITS)
        parser.add_argument("--env", action="append", metavar="NAME=VALUE", help="an environment variable (repeat)")
        parser.add_argument("--cluster", action="append", help="a cluster it may run on (repeat; none: any)")
        parser.add_argument("--public", action=argparse.BooleanOptionalAction, default=None, help="no token needed")

    create = actions.add_parser("create", help="create a service (revision 1); replicas start within seconds")
    create.add_argument("name", help="lower-case letters, digits and dashes")
    create.add_argument("--team", help="a team's slug (optional if you may use one team only)")
    create.add_argument("--project", help="a project's slug")
    program(create)
    _add(create, SCALING)
    listing = actions.add_parser("list", help="the services you may see")
    listing.add_argument("--json", action="store_true", help="the API's rows as JSON")
    show = actions.add_parser("show", help="a service: endpoint, replicas, revisions, cost")
    show.add_argument("service", help="its id or name (team/name)")
    show.add_argument("--json", action="store_true", help="the API's answer as JSON")
    update = actions.add_parser("update", help="change it: a change of the program rolls out a new revision")
    update.add_argument("service", help="its id or name (team/name)")
    program(update)
    _add(update, SCALING)
    scale = actions.add_parser("scale", help="change its bounds, metric, target or windows")
    scale.add_argument("service", help="its id or name (team/name)")
    _add(scale, SCALING)
    for name, text in (
        ("stop", "stop every replica (the service stays)"),
        ("start", "run a stopped service again"),
        ("rollback", "abandon a rollout, or roll out the revision before the current one"),
    ):
        actions.add_parser(name, help=text).add_argument("service", help="its id or name (team/name)")
    url = actions.add_parser("url", help="the stable endpoint's URL")
    url.add_argument("service", help="its id or name (team/name)")
    url.add_argument("--curl", action="store_true", help="and a curl example")
