"""``qm`` for arrays (sweeps) and pipelines (docs/jobs.md §Arrays and sweeps, §Pipelines).

``qm submit`` sends a job file where it belongs: a file with ``steps:`` is a pipeline (``/api/v1/pipelines/``),
one with ``array:`` (or ``qm submit --array 0-99``) an array of tasks of the rest of the file
(``/api/v1/arrays/``), anything else one job. ``qm array show|cancel|requeue ID`` reads an array (its tasks
by state, the failed first) and changes it.

``qm.cli`` registers these commands and lends them its table and time formats and its error (``admin.Lent``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from qm.admin import Lent

if TYPE_CHECKING:
    from qm.client import Client, Settings

OK = 0


def destination(fields: Mapping[str, Any], array: str | None, max_running: int | None) -> tuple[str, dict[str, Any]]:
    """Where a job file goes, and the body: ``("pipelines/", ...)``, ``("arrays/", ...)`` or ``("jobs/", ...)``.
    ``--array`` and ``--max-running`` make (or change) an array of the file's job."""
    if "steps" in fields:
        return "pipelines/", dict(fields)
    job = {k: v for k, v in fields.items() if k != "array"}
    given = fields.get("array")
    if given is None and array is None and max_running is None:
        return "jobs/", job
    shape: dict[str, Any] = dict(given) if isinstance(given, Mapping) else {}
    if given is not None and not isinstance(given, Mapping):
        shape = {"range": str(given)}  # array: 0-99
    if array is not None:
        shape = {k: v for k, v in shape.items() if k == "max_running"} | {"range": array}
    if max_running is not None:
        shape["max_running"] = max_running
    return "arrays/", {"job": job, **shape}


def submitted(path: str, status: int, answer: Mapping[str, Any], out: TextIO) -> None:
    """What ``qm submit`` says of an array or a pipeline it sent."""
    if path == "pipelines/":
        steps = ", ".join(f"{name}: {step['kind']} {step['id']}" for name, step in answer["steps"].items())
        print(f"Submitted a pipeline of {len(answer['steps'])} steps ({steps}).", file=out)
    elif status == 200:
        print(f"Array {answer['id']} was already submitted with this idempotency key.", file=out)
    else:
        limit = f", at most {answer['max_running']} at once" if answer["max_running"] else ""
        print(f"Submitted array {answer['id']} ({answer['name']}): {answer['count']} tasks{limit}.", file=out)


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def array(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        """``qm array show|cancel|requeue ID``."""
        if args.action == "show":
            return self.show(args, settings, client)
        body = {"reason": args.reason or ""} if args.action == "cancel" else {}
        _, answer = client.call("POST", f"arrays/{args.id}/{args.action}/", body=body)
        count = answer.get("cancelled", answer.get("requeued", 0))
        verb = "Cancelled" if args.action == "cancel" else "Requeued"
        print(f"{verb} {count} task{'s' if count != 1 else ''} of array {args.id}.", file=settings.out)
        return OK

    def show(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        array = client.get(f"arrays/{args.id}/")
        out = settings.out
        if args.json:
            print(json.dumps(array, indent=2), file=out)
            return OK
        limit = f"at most {array['max_running']} at once" if array["max_running"] else "no limit at once"
        print(f"Array {array['id']}: {array['name']} ({array['team']}, {array['count']} tasks, {limit})", file=out)
        counts = ", ".join(f"{state} {n}" for state, n in array["counts"].items())
        print(f"  {array['done']} of {array['count']} done: {counts}", file=out)
        rows = [["INDEX", "JOB", "STATE", "PARAMS", "NOTE"]]
        for task in array["tasks"]:
            params = " ".join(f"{k}={v}" for k, v in task["params"].items()) or "-"
            rows.append(
                [str(task["index"]), str(task["id"]), task["state"], params, task["message"] or task["pending_message"]]
            )
        self.lent.table(rows, out)
        if len(array["tasks"]) < array["count"]:
            print(f"{len(array['tasks'])} of {array['count']} tasks shown: qm list --array {array['id']}", file=out)
        return OK


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm array`` to ``qm``'s parser, through its ``command(name, handler, help)``."""
    run = Commands(lent)
    array = command("array", run.array, "an array of tasks (a sweep): show it, cancel it, requeue its failed tasks")
    actions = array.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", help="its tasks by state, the failed ones first")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true", help="the API's answer as JSON")
    cancel = actions.add_parser("cancel", help="cancel every task still waiting or running")
    cancel.add_argument("id", type=int)
    cancel.add_argument("--reason", help="why (kept in the tasks' timelines and the audit log)")
    requeue = actions.add_parser("requeue", help="give every failed task one more try")
    requeue.add_argument("id", type=int)
