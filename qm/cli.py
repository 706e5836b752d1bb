"""``qm``: the command-line client of the Quartermaster API (submit, list, show, follow and cancel jobs;
admins preempt and requeue them, and look after clusters, nodes and maintenance: ``qm/admin.py``; inside a
job, report its checkpoints).

It talks to the REST API only (``/api/v1/``) with a personal API token, and imports nothing of Django, so
it runs on any machine with ``requests`` and PyYAML. Where it finds the server and the token, first match
wins: ``--url`` / ``--token``, then ``QM_URL`` / ``QM_TOKEN``, then the file ``qm login`` writes
(``$XDG_CONFIG_HOME/quartermaster/config.yaml``, mode 0600; its token is sent only to the URL it was issued
by). Exit status: 0 done, 1 refused or failed (and ``follow`` of a job that did not succeed), 2 bad input.
The token is never printed. ``qm checkpoint`` is the exception to all of this: it runs inside a job and
reads what Quartermaster started the job with (``QM_API_URL``, ``QM_JOB_TOKEN``, ``QM_JOB_ID``) instead.

Size: the argument parser of every ``qm`` command (``build_parser``) and the job commands it dispatches to; the
other commands already live in their own modules (``qm/admin.py``, ``qm/services.py`` ...), and the job-file reading
(``JobFile``, ``load_job_file``) would split out next.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import platform
import re
import sys
import time
import webbrowser
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from qm import admin, arrays, models_cmd, services
from qm.client import (
    BAD_INPUT,
    DEFAULT_URL,
    FAILED,
    FINAL,
    OK,
    WAITING,
    Client,
    CliError,
    Settings,
    save_config,
    settings_from,
)

# --------------------------------------------------------------------------------------- job files


class JobFileLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading numbers as YAML 1.2 and JSON do: ``1e999`` is a number (too big: refused
    as not finite), not the text PyYAML's YAML 1.1 rules would make of it."""


JobFileLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)$"),
    list("-+.0123456789"),
)
FLOAT_TAG = "tag:yaml.org,2002:float"


@dataclass
class JobFile:
    """A job file's fields, and the line each top-level key is on (to point at it when the API refuses it)."""

    name: str
    fields: dict[str, Any]
    lines: dict[str, int]

    def refused(self, error: CliError) -> CliError:
        """The API's refusal with each field's line in this file (the API alone knows the fields: an unknown
        one is named there, with the closest known name)."""
        for key, messages in error.fields.items():
            if key in self.lines:
                error.fields[key] = [f"{message} (line {self.lines[key]})" for message in _messages(messages)]
        return error


def read_job_file(name: str, stdin: TextIO | None = None) -> dict[str, Any]:
    """A job file's fields: a YAML mapping of the API's submission fields (``load_job_file``)."""
    return load_job_file(name, stdin).fields


def load_job_file(name: str, stdin: TextIO | None = None) -> JobFile:
    """A job file: a YAML mapping of the API's submission fields (which fields there are is the API's to
    say). Malformed YAML, a repeated key, an anchor or alias, or a number that is not finite (``.nan``,
    ``.inf``, ``1e999``) is refused here, with its line, before anything is sent."""
    try:
        text = (stdin or sys.stdin).read() if name == "-" else Path(name).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"Cannot read {name}: {getattr(error, 'strerror', None) or error}", status=BAD_INPUT) from None
    try:
        if unsendable := unsendable_values(text):
            raise CliError(f"{name}: {', '.join(unsendable)}: cannot be sent as it is.", unsendable, BAD_INPUT)
        root = yaml.compose(text, Loader=JobFileLoader)
    except yaml.YAMLError as error:
        raise CliError(f"{name}: not valid YAML: {_yaml_problem(error)}", status=BAD_INPUT) from None
    if root is None:
        raise CliError(f"{name} is empty: it should map fields to values (name: train, ...).", status=BAD_INPUT)
    if not isinstance(root, yaml.MappingNode):
        raise CliError(
            f"{name}, line {root.start_mark.line + 1}: the file should map fields to values (name: train, ...).",
            status=BAD_INPUT,
        )
    problems: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    for key_node, _ in root.value:
        line = key_node.start_mark.line + 1
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
        if key in seen:
            problems[key] = [f"line {line}: given twice (first on line {seen[key]})."]
        seen.setdefault(key, line)
    if problems:
        raise CliError(f"{name}: {', '.join(problems)} not allowed here.", problems, BAD_INPUT)
    try:
        data = yaml.load(text, Loader=JobFileLoader)  # noqa: S506 - a SafeLoader, with YAML 1.2 numbers
    except yaml.YAMLError as error:
        raise CliError(f"{name}: not valid YAML: {_yaml_problem(error)}", status=BAD_INPUT) from None
    assert isinstance(data, dict)
    return JobFile(name, data, seen)


@dataclass
class _Collection:
    """Where the event walk of ``unsendable_values`` is: in a mapping (at a key or at its value) or a list."""

    path: str
    mapping: bool
    at_key: bool = True
    key: str = "?"
    index: int = 0

    def child(self) -> str:
        if not self.mapping:
            return f"{self.path}[{self.index}]"
        return f"{self.path}.{self.key}" if self.path else self.key

    def advance(self) -> None:
        if self.mapping:
            self.at_key = not self.at_key
        else:
            self.index += 1


def unsendable_values(text: str) -> dict[str, list[str]]:
    """What a job file holds that must not be sent, by key (``env.SEED``, ``command[2]``), each with its
    line: anchors and aliases (a few lines of them can expand to gigabytes, and a key that quietly repeats
    another's value is not what anyone reviewing the file reads), and numbers that are not finite (JSON has
    none; the server would read them as something else or not at all). Read from the parser's events, so
    nothing is expanded or built first."""
    problems: dict[str, list[str]] = {}
    loader = JobFileLoader(text)
    stack: list[_Collection] = []
    try:
        while loader.check_event():
            event = loader.get_event()  # type: ignore[no-untyped-call]
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                stack.pop()
                if stack:
                    stack[-1].advance()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            here = stack[-1] if stack else None
            is_key = here is not None and here.mapping and here.at_key
            where = (here.path if is_key else here.child()) if here is not None else ""
            line = f"line {event.start_mark.line + 1}" if event.start_mark else "a line"
            if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
                problems.setdefault(where or "(the file)", []).append(
                    f"{line}: YAML anchors and aliases are not allowed; write the value out."
                )
            if isinstance(event, yaml.ScalarEvent) and not is_key and _not_finite(loader, event):
                problems.setdefault(where or "(the file)", []).append(
                    f"{line}: {event.value!r} is not a finite number."
                )
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                stack.append(_Collection(where, isinstance(event, yaml.MappingStartEvent)))
                continue
            if here is not None:
                if is_key:
                    here.key = event.value if isinstance(event, yaml.ScalarEvent) else "?"
                here.advance()
    finally:
        loader.dispose()
    return problems


def _not_finite(loader: JobFileLoader, event: yaml.ScalarEvent) -> bool:
    tag = event.tag
    if tag in (None, "!"):
        tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
    if tag != FLOAT_TAG:
        return False
    try:
        number = loader.construct_yaml_float(yaml.ScalarNode(FLOAT_TAG, event.value))
    except ValueError:
        return False  # not a number at all: the loader says so after this
    return not math.isfinite(number)


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


# ----------------------------------------------------------------------------------------- display


def when(value: str | None) -> str:
    """An API timestamp in this machine's time zone, to the second."""
    if not value:
        return "-"
    try:
        return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return value


def duration(seconds: int) -> str:
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"


def resources(job: Mapping[str, Any]) -> str:
    """``2 x 8 H100-SXM-80GB``, ``0.25 (any type)``, ``4 x CPU only``."""
    types = "/".join(job.get("accelerator_types") or []) or "(any type)"
    if not job["accelerators"]:
        what = "CPU only"
    elif job["accelerator_fraction"] < 1:
        what = f"{job['accelerator_fraction']:g} {types}"
    else:
        what = f"{job['accelerators']} {types}"
    return f"{job['workers']} x {what}" if job["workers"] > 1 else what


def note(job: Mapping[str, Any]) -> str:
    """What a list row says beside the state: why it waits, or where it runs."""
    if job["state"] in WAITING:
        return job.get("pending_message") or "waiting for the next placement cycle"
    if job.get("cluster"):
        return f"on {job['cluster']}, cost so far {job['cost_so_far']}"
    return ""


def table(rows: Sequence[Sequence[str]], out: TextIO, indent: str = "") -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print(indent + line.rstrip(), file=out)


def event_line(event: Mapping[str, Any]) -> str:
    move = f"{event['from_state'] or '-'} -> {event['to_state']}"
    text = f"  {event['message']}" if event["message"] else ""
    return f"{when(event['created_at'])}  {move:<22} {event['reason']:<12}{text}"


def program(job: Mapping[str, Any]) -> str:
    """What a job runs, in a few words: a Ray job's entrypoint and head, an image and command, or a script."""
    if job.get("kind") == "ray":
        head = f"{job['head_accelerators']} accelerators, {job['head_cpu']:g} cores, {job['head_memory_gib']:g} GiB"
        return f"Ray: {job['entrypoint']} (head: {head})"
    if job.get("kind") == "session":
        return (
            f"an interactive session ({job.get('session_app')}, ends after {job.get('session_idle_minutes')} min idle)"
        )
    return " ".join([job["image"], *job["command"]]) if job["image"] else "a batch script"


def describe(job: Mapping[str, Any], out: TextIO) -> None:
    """``qm show``: a job in plain words, one labelled line each."""
    where = job["team"] + (f", project {job['project']}" if job["project"] else "")
    cores = f"{job['cpu']:g} core" + ("" if job["cpu"] == 1 else "s")
    asks = f"{resources(job)}; {cores} and {job['memory_gib']:g} GiB per worker"
    asks += f"; time limit {duration(job['time_limit'])}" + ("" if job["preemptible"] else "; not preemptible")
    runs = program(job)
    lines = [
        ("state", f"{job['state']} since {when(job['state_changed_at'])}"),
        ("team", f"{where}; queue {job['queue']}, tier {job['tier']}"),
        ("submitted", f"{when(job['submitted_at'])} by {job['submitted_by']}"),
        ("asks for", asks),
        ("runs", runs),
    ]
    if job.get("data_locality"):
        lines.append(("data near", job["data_locality"]))
    if job["topology_level"]:
        lines.append(("topology", f"one {job['topology_level']} ({job['topology_mode']})"))
    if job["state"] in WAITING:
        lines.append(("waiting", job["pending_message"] or "Waiting for the next placement cycle."))
        if job["queue_position"] is not None:
            lines.append(("position", f"#{job['queue_position']} in the queue (#1 starts next)"))
        if job["estimated_start"]:
            lines.append(("est. start", when(job["estimated_start"])))
    placement = job.get("placement")
    if placement:
        flavor = placement["flavor"] or "CPU only"
        lines.append(("placement", f"{placement['cluster']}, {flavor}, {placement['cost_per_hour']} per hour"))
        lines.append(("admitted", when(placement["admitted_at"])))
        if placement["started_at"]:
            lines.append(("started", when(placement["started_at"])))
        for node in placement["nodes"]:
            workers = f"{node['workers']} worker" + ("s" if node["workers"] != 1 else "")
            lines.append(("node", f"{node['name']}: {workers}, {len(node['accelerators'])} accelerators"))
    lines += dashboard(job)
    lines.append(("cost so far", str(job["cost_so_far"])))
    if job["finished_at"]:
        lines.append(("finished", when(job["finished_at"])))
    if job["message"]:
        lines.append(("message", job["message"]))
    checkpoint = job.get("last_checkpoint")
    if checkpoint:
        step = f", step {checkpoint['step']}" if checkpoint["step"] is not None else ""
        at = f"{when(checkpoint['reported_at'])}, attempt {checkpoint['attempt']}"
        lines.append(("checkpoint", f"{checkpoint['location']}{step} ({at})"))
    print(f"Job {job['id']}: {job['name']}", file=out)
    for label, value in lines:
        print(f"  {label:<12} {value}", file=out)
    if job["attempts"]:
        print("Attempts:", file=out)
        table([ATTEMPT_COLUMNS, *(attempt_row(a) for a in job["attempts"])], out, indent="  ")


def dashboard(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Where to watch the job's current attempt (its Ray dashboard), if it is placed and the cluster says."""
    current = next((a for a in job["attempts"] if a["number"] == job["attempt"]), None)
    if job.get("placement") and current and current.get("dashboard_url"):
        return [("dashboard", current["dashboard_url"])]
    return []


ATTEMPT_COLUMNS = ("#", "CLUSTER", "NODES", "STATE", "STARTED", "ENDED", "CKPTS", "COST", "WHY IT ENDED")


def attempt_row(attempt: Mapping[str, Any]) -> tuple[str, ...]:
    """One attempt as ``qm show`` lists it: where, what became of it and why."""
    nodes = ",".join(node["name"] for node in attempt["nodes"]) or "-"
    return (
        str(attempt["number"]),
        attempt["cluster"],
        nodes,
        attempt["state"],
        when(attempt["started_at"]),
        when(attempt["ended_at"]),
        str(attempt["checkpoints"]),
        str(attempt["cost"]),
        attempt["ended_because"] or "-",
    )


# ---------------------------------------------------------------------------------------- commands


def cmd_login(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    username = args.username or input("Username: ").strip()
    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else getpass.getpass("Password: ")
    body = {"username": username, "password": password, "name": args.name or f"qm on {platform.node() or 'cli'}"}
    _, answer = client.call("POST", "auth/token/", body=body, auth=False)
    path = save_config(settings.url, answer["token"])
    expires = f", expires {when(answer.get('expires_at'))}" if answer.get("expires_at") else ""
    print(f"Signed in to {settings.url} as {username}; the token is saved in {path}{expires}.", file=settings.out)
    return OK


def ray_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The fields ``qm submit``'s options give (a Ray job's above all); they win over the job file's."""
    fields: dict[str, Any] = {}
    if args.ray:
        fields["kind"] = "ray"
    if args.session:
        fields["kind"] = "session"
        fields["session_app"] = args.session
    for option, name in (
        ("name", "name"),
        ("time_limit", "time_limit"),
        ("entrypoint", "entrypoint"),
        ("head_cpu", "head_cpu"),
        ("head_memory_gib", "head_memory_gib"),
        ("head_accelerators", "head_accelerators"),
        ("idle_minutes", "session_idle_minutes"),
    ):
        if getattr(args, option) is not None:
            fields[name] = getattr(args, option)
    if args.runtime_env:
        fields["runtime_env"] = _runtime_env(args.runtime_env)
    return fields


def _runtime_env(name: str) -> Any:
    """A Ray runtime environment from a JSON or YAML file (JSON is YAML); the API judges what it holds."""
    try:
        text = Path(name).read_text()
    except (OSError, UnicodeDecodeError) as error:
        message = f"Cannot read {name}: {getattr(error, 'strerror', None) or error}"
        raise CliError(message, {"runtime_env": [message]}, BAD_INPUT) from None
    try:
        return yaml.load(text, Loader=JobFileLoader)  # noqa: S506 - a SafeLoader, with YAML 1.2 numbers
    except yaml.YAMLError as error:
        message = f"{name}: not valid JSON or YAML: {_yaml_problem(error)}"
        raise CliError(message, {"runtime_env": [message]}, BAD_INPUT) from None


def cmd_submit(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    job_file = load_job_file(args.file) if args.file else JobFile("(options)", {}, {})
    body = {**job_file.fields, **ray_fields(args)}
    if not body:
        raise CliError("Give a job file, or the job's fields as options (qm submit --help).", status=BAD_INPUT)
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    out = settings.out
    path, body = arrays.destination(body, args.array, args.max_running)
    if path != "jobs/" and args.dry_run:
        body = body.get("job", body)  # the preview of one task
        path = "jobs/"
    try:
        if args.dry_run:
            return _preview(client, body, headers, out)
        status, job = client.call("POST", path, body=body, headers=headers)
    except CliError as error:
        raise job_file.refused(error) from None
    if path != "jobs/":
        arrays.submitted(path, status, job, out)
    elif status == 200:
        print(f"Job {job['id']} was already submitted with this idempotency key; it is {job['state']}.", file=out)
    else:
        print(f"Submitted job {job['id']} ({job['name']}): {job['state']}.", file=out)
    return OK


def _preview(client: Client, body: Any, headers: Mapping[str, str], out: TextIO) -> int:
    """``qm submit --dry-run``: what the job would cost and when it would start."""
    _, preview = client.call("POST", "jobs/preview/", body=body, headers=headers)
    price = "unknown" if preview["cost_per_hour"] is None else f"{preview['cost_per_hour']:.2f}"
    print(f"Dry run: nothing submitted. Cost per hour: {price}.", file=out)
    if preview["starts_now"]:
        print("It would start now.", file=out)
    else:
        start = when(preview["estimated_start"]) if preview["estimated_start"] else "unknown"
        print(f"It would wait ({preview['reason']}): {preview['message']} Estimated start: {start}.", file=out)
    return OK


def _list_params(args: argparse.Namespace) -> dict[str, str]:
    params = {"state": args.state, "team": args.team, "project": args.project, "q": args.query}
    if args.array is not None:
        params["array"] = str(args.array)
    if args.mine:
        params["submitted_by"] = "me"
    return {key: value for key, value in params.items() if value}


def cmd_list(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    params = _list_params(args)
    jobs: list[dict[str, Any]] = []
    for answer in client.pages("jobs/", params):
        jobs += answer["results"]
        count = answer["count"]
        if not args.all_pages:
            break
    if len(jobs) < count:
        print(f"{len(jobs)} of {count} jobs shown; --all-pages for all.", file=sys.stderr)
    if args.json:
        print(json.dumps(jobs, indent=2), file=settings.out)
        return OK
    if not jobs:
        print("No jobs.", file=settings.out)
        return OK
    rows = [["ID", "NAME", "TEAM", "USER", "STATE", "RESOURCES", "SUBMITTED", "NOTE"]]
    rows += [
        [
            str(j["id"]),
            j["name"],
            j["team"],
            j["submitted_by"],
            j["state"],
            resources(j),
            when(j["submitted_at"]),
            note(j),
        ]
        for j in jobs
    ]
    table(rows, settings.out)
    return OK


def cmd_show(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    job = client.get(f"jobs/{args.id}/")
    if args.json:
        print(json.dumps(job, indent=2), file=settings.out)
    else:
        describe(job, settings.out)
    return OK


def cmd_open(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    """Print the link that opens an interactive session (its secret is in it: yours alone), and open it in a
    browser with ``--browser``."""
    link = client.get(f"jobs/{args.id}/session/")["url"]
    print(link, file=settings.out)
    if args.browser:
        webbrowser.open(link)
    return OK


def cmd_change(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    """``cancel``, ``preempt`` or ``requeue`` (the command's name is the endpoint's) a job, with a reason."""
    _, job = client.call("POST", f"jobs/{args.id}/{args.command}/", body={"reason": args.reason or ""})
    print(f"Job {job['id']} ({job['name']}): {job['state']}.", file=settings.out)
    return OK


def cmd_events(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    events = list(client.rows(f"jobs/{args.id}/events/"))
    if args.json:
        print(json.dumps(events, indent=2), file=settings.out)
    else:
        for event in events:
            print(event_line(event), file=settings.out)
    return OK


def follow(
    client: Client, job_id: int, interval: float, out: TextIO, sleep: Callable[[float], None] = time.sleep
) -> int:
    """Print the job's events as they come until it is over: 0 if it succeeded, 1 if not."""
    last = 0
    while True:
        job = client.get(f"jobs/{job_id}/")  # read before the events: a final state's event is then printed
        for event in client.rows(f"jobs/{job_id}/events/", {"after": last}):
            print(event_line(event), file=out, flush=True)
            last = max(last, event["id"])
        if job["state"] in FINAL:
            tail = f": {job['message']}" if job["message"] and job["state"] != "succeeded" else ""
            print(f"Job {job_id} {job['state']}{tail}", file=out, flush=True)
            return OK if job["state"] == "succeeded" else FAILED
        sleep(interval)


def cmd_debug(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    """Everything about one job that helps tell what happened (``GET jobs/{id}/debug/``)."""
    found = client.get(f"jobs/{args.id}/debug/", {"lines": args.lines})
    if args.json:
        print(json.dumps(found, indent=2), file=settings.out)
        return OK
    out, job = settings.out, found["job"]
    print(f"Job #{job['id']} {job['name']}: {job['state']}, attempt {job['attempt']}", file=out)
    if job["pending_reason"]:
        start = f" (estimated start {when(job['estimated_start'])})" if job["estimated_start"] else ""
        print(f"  waiting: {job['pending_reason']}: {job['pending_message']}{start}", file=out)
    if job["message"]:
        print(f"  {job['message']}", file=out)
    sections: list[tuple[str, list[list[str]], list[str]]] = [
        (
            "Attempts",
            [
                [
                    str(a["number"]),
                    a["cluster"],
                    ",".join(a["nodes"]) or "-",
                    a["outcome"],
                    a["reason"] or "-",
                    when(a["started_at"]),
                    when(a["ended_at"]),
                ]
                for a in found["attempts"]
            ],
            ["#", "CLUSTER", "NODES", "OUTCOME", "REASON", "STARTED", "ENDED"],
        ),
        (
            "Why it waited",
            [[when(w["at"]), w["waited_for"] or w["event"], w["message"]] for w in found["waits"]],
            ["WHEN", "REASON", "MESSAGE"],
        ),
        (
            "Nodes",
            [
                [
                    n["name"],
                    n["state"],
                    "yes" if n["healthy"] else "NO",
                    f"{c['check']}: {c['message']}" if (c := n["last_failing_check"]) else "-",
                ]
                for n in found["nodes"]
            ],
            ["NODE", "STATE", "HEALTHY", "LAST FAILING CHECK"],
        ),
        (
            "Progress",
            [
                [
                    str(p["worker"]),
                    str(p["step"]),
                    "-" if p["step_seconds"] is None else f"{p['step_seconds']:g}",
                    when(p["at"]),
                ]
                for p in found["progress"]
            ],
            ["WORKER", "STEP", "S/STEP", "REPORTED"],
        ),
        ("Flags", [[when(f["at"]), f["kind"], f["message"]] for f in found["flags"]], ["WHEN", "KIND", "EVIDENCE"]),
        (
            "Timeline",
            [[when(e["at"]), f"{e['from'] or '-'} -> {e['to']}", e["reason"], e["message"]] for e in found["timeline"]],
            ["WHEN", "MOVE", "REASON", "MESSAGE"],
        ),
    ]
    for title, rows, header in sections:
        print(f"\n{title}:", file=out)
        if rows:
            table([header, *rows], out, indent="  ")
        else:
            print("  (none)", file=out)
    used = found["utilization"]
    mean = "not measured" if used["mean_utilization"] is None else f"{used['mean_utilization']} %"
    print(
        f"\nGPU utilization: {mean}; {used['gpu_hours_allocated']} GPU-hours allocated, "
        f"{used['gpu_hours_used']} used, {used['gpu_hours_unmeasured']} unmeasured",
        file=out,
    )
    output = found["output"]
    where = f" (attempt {output['attempt']})" if output["attempt"] else ""
    print(f"\nLast lines of its output{where}:", file=out)
    print(output["error"] or output["text"].rstrip("\n") or "(empty)", file=out)
    return OK


def cmd_follow(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    return follow(client, args.id, args.interval, settings.out, args.sleep)


def cmd_logs(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    """Print a job's output (``GET jobs/{id}/logs/``), page after page; with ``--follow`` poll on from the last
    offset until the job has ended and its output is complete, going on to a newer attempt's when one starts."""
    attempt: int | None = args.attempt
    offset, first = "", True
    while True:
        query: dict[str, Any] = {"worker": args.worker or ""}
        if attempt is not None:
            query["attempt"] = attempt
        if offset:
            query["offset"] = offset
        elif first and args.tail is not None:
            query["tail"] = args.tail
        page = client.get(f"jobs/{args.id}/logs/", query)
        first = False
        settings.out.write(page["text"])
        settings.out.flush()
        if attempt is None and page["attempt"] is not None:
            attempt = page["attempt"]
        offset = page["next_offset"]
        if page["more"]:
            continue
        if not args.follow:
            return OK
        newer = page["latest_attempt"]
        if page["complete"] and args.attempt is None and newer is not None and newer != attempt:
            print(f"--- attempt {newer}", file=settings.out, flush=True)
            attempt, offset = newer, ""
            continue
        if page["complete"] and page["job_state"] in FINAL:
            return OK if page["job_state"] == "succeeded" else FAILED
        args.sleep(args.interval)


#: What ``qm checkpoint`` and ``qm progress`` say when they are not run inside a job.
NOT_IN_A_JOB = "qm {command} runs inside a job started by Quartermaster ({name} is not set)."
#: Where a worker's rank among the job's nodes is found when ``qm progress`` is not told (torchrun, Slurm,
#: a Kubernetes indexed Job), in that order.
RANK_VARIABLES = ("QM_WORKER", "NODE_RANK", "GROUP_RANK", "SLURM_NODEID", "JOB_COMPLETION_INDEX")


def job_environment(command: str = "checkpoint") -> tuple[str, str, int]:
    """The server, the job token and the job's id a job was started with (docs/jobs.md)."""
    values = {name: os.environ.get(name, "").strip() for name in ("QM_JOB_TOKEN", "QM_API_URL", "QM_JOB_ID")}
    for name, value in values.items():
        if not value:
            raise CliError(NOT_IN_A_JOB.format(command=command, name=name))
    # QM_JOB_ID is the attempt's key on its cluster, "<job id>-<attempt number>-<letters>" (older jobs have no
    # letters; a bare job id is taken too).
    match = re.fullmatch(r"([0-9]+)(?:-[0-9]+(?:-[0-9a-f]+)?)?", values["QM_JOB_ID"])
    if not match:
        raise CliError(f"QM_JOB_ID={values['QM_JOB_ID']!r} is not a job's id.")
    url = values["QM_API_URL"].rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise CliError(f"QM_API_URL must start with http:// or https://, not {url!r}.")
    return url, values["QM_JOB_TOKEN"], int(match.group(1))


def cmd_checkpoint(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    """Report a checkpoint of the job this runs in, with the job's own token (not a person's)."""
    url, token, job_id = job_environment()
    job_client = Client(url, token, refused_hint="check QM_JOB_TOKEN (a job token is valid in its own attempt only)")
    body = {"location": args.location, "step": args.step}
    _, checkpoint = job_client.call("POST", f"jobs/{job_id}/checkpoints/", body=body)
    step = f" at step {checkpoint['step']}" if checkpoint["step"] is not None else ""
    where = f"job {job_id}, attempt {checkpoint['attempt']}"
    print(f"Checkpoint {checkpoint['location']}{step} reported ({where}).", file=settings.out)
    return OK


def cmd_progress(args: argparse.Namespace, settings: Settings, client: Client) -> int:
    """Report how far this worker got, with the job's own token."""
    url, token, job_id = job_environment("progress")
    worker = args.worker
    if worker is None:
        found = next(((n, os.environ[n]) for n in RANK_VARIABLES if os.environ.get(n, "").strip()), None)
        if found is not None and not found[1].strip().isdigit():
            raise CliError(f"{found[0]}={found[1]!r} is not a worker's index; give --worker.", status=BAD_INPUT)
        worker = int(found[1]) if found is not None else 0
    job_client = Client(url, token, refused_hint="check QM_JOB_TOKEN (a job token is valid in its own attempt only)")
    body = {"worker": worker, "step": args.step, "step_seconds": args.step_seconds}
    _, row = job_client.call("POST", f"jobs/{job_id}/progress/", body=body)
    pace = f", {row['step_seconds']:g} s a step" if row["step_seconds"] is not None else ""
    print(
        f"Worker {row['worker']} at step {row['step']}{pace} (job {job_id}, attempt {row['attempt']}).",
        file=settings.out,
    )
    return OK


# ------------------------------------------------------------------------------------------- parser


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=f"the server (QM_URL; default {DEFAULT_URL})")
    common.add_argument("--token", default=argparse.SUPPRESS, help="an API token (QM_TOKEN; else `qm login`'s)")
    parser = argparse.ArgumentParser(
        prog="qm", parents=[common], description="Submit and follow jobs on a Quartermaster fleet."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[..., int], text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=text, description=text)
        sub.set_defaults(handler=handler)
        return sub

    login = command("login", cmd_login, "get an API token with your username and password and keep it")
    login.add_argument("--username", "-u")
    login.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    login.add_argument("--name", help="the token's name (default: qm on this machine)")

    submit = command(
        "submit", cmd_submit, "submit the job, array or pipeline a YAML file describes (- for standard input)"
    )
    submit.add_argument("file", nargs="?", help="a YAML file of the job's fields; options below win over it")
    submit.add_argument("--name", help="the job's name")
    submit.add_argument("--time-limit", help="e.g. 2h, 90m or seconds")
    ray = submit.add_argument_group("Ray jobs", "a Ray cluster of a head and the workers, that runs the entrypoint")
    ray.add_argument("--ray", action="store_true", help="a Ray job (kind: ray in a job file)")
    ray.add_argument("--entrypoint", help="the command it runs on the Ray cluster, e.g. 'python main.py'")
    ray.add_argument("--runtime-env", metavar="FILE", help="Ray's runtime environment, a JSON or YAML file")
    ray.add_argument("--head-cpu", type=float, help="cores of the Ray head (default 1)")
    ray.add_argument("--head-memory-gib", type=float, help="GiB of the Ray head (default 4)")
    ray.add_argument("--head-accelerators", type=int, help="accelerators of the Ray head (default 0)")
    submit.add_argument("--array", metavar="RANGE", help="run it as an array of tasks, e.g. 0-99 or 0-99:2")
    submit.add_argument("--max-running", type=int, help="an array's limit on tasks running at once")
    interactive = submit.add_argument_group("Interactive sessions", "JupyterLab or a shell, opened with qm open")
    interactive.add_argument(
        "--session", choices=("jupyterlab", "shell"), help="an interactive session running this app (kind: session)"
    )
    interactive.add_argument("--idle-minutes", type=int, help="it ends after this many minutes without activity")
    submit.add_argument("--dry-run", action="store_true", help="only say what it would cost and when it would start")
    submit.add_argument("--idempotency-key", help="submitting again with the same key returns the first job")

    listing = command("list", cmd_list, "list jobs, newest first")
    listing.add_argument("--state", help="states, comma-separated (or active, final)")
    listing.add_argument("--team", help="a team's slug")
    listing.add_argument("--project", help="a project's slug")
    listing.add_argument("--mine", action="store_true", help="only jobs I submitted")
    listing.add_argument("--query", "-q", help="name contains")
    listing.add_argument("--array", type=int, help="only the tasks of this array")
    listing.add_argument("--all-pages", action="store_true", help="every page, not only the first 50 jobs")
    listing.add_argument("--json", action="store_true", help="the API's rows as JSON")

    show = command("show", cmd_show, "a job's details: state, why it waits, where it runs, cost so far")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true", help="the API's answer as JSON")

    opening = command("open", cmd_open, "print the link that opens your interactive session (it holds its secret)")
    opening.add_argument("id", type=int)
    opening.add_argument("--browser", "-b", action="store_true", help="open it in a web browser too")

    cancel = command("cancel", cmd_change, "cancel a job")
    cancel.add_argument("id", type=int)
    cancel.add_argument("--reason", help="why (kept in the job's timeline and the audit log)")

    preempt = command("preempt", cmd_change, "admins: stop a running job within its grace period and requeue it")
    preempt.add_argument("id", type=int)
    preempt.add_argument("--reason", required=True, help="why (kept in the job's timeline and the audit log)")

    requeue = command("requeue", cmd_change, "admins: put a failed job back in its queue for one more try")
    requeue.add_argument("id", type=int)
    requeue.add_argument("--reason", required=True, help="why (kept in the job's timeline and the audit log)")

    debugging = command("debug", cmd_debug, "everything about a job that helps tell what happened to it")
    debugging.add_argument("id", type=int)
    debugging.add_argument("--lines", type=int, default=40, help="lines of output to show (default 40)")
    debugging.add_argument("--json", action="store_true", help="the API's answer as JSON")

    following = command("follow", cmd_follow, "print a job's events until it ends (exit 0 if it succeeded)")
    following.add_argument("id", type=int)
    following.add_argument("--interval", type=_positive, default=5.0, help="seconds between polls (default 5)")

    output = command("logs", cmd_logs, "a job's output, from the cluster it runs on")
    output.add_argument("id", type=int)
    output.add_argument(
        "--worker", "-w", help="a worker's index, or head / submitter of a Ray job (default: the main output)"
    )
    output.add_argument("--tail", "-n", type=int, help="start with the last N lines")
    output.add_argument("--attempt", type=int, help="an attempt's number (default: the newest)")
    output.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the job ends")
    output.add_argument("--interval", type=_positive, default=2.0, help="seconds between polls with -f (default 2)")

    events = command("events", cmd_events, "a job's timeline")
    events.add_argument("id", type=int)
    events.add_argument("--json", action="store_true", help="the API's rows as JSON")

    checkpoint = command(
        "checkpoint", cmd_checkpoint, "inside a job: report a checkpoint (a restart resumes from the last one)"
    )
    checkpoint.add_argument("--location", required=True, help="where the checkpoint is, e.g. s3://bucket/run/step-1000")
    checkpoint.add_argument("--step", type=int, help="how far it got: a step, an epoch")

    progress = command(
        "progress",
        cmd_progress,
        "inside a job: report this worker's step count (stragglers and hangs are flagged from it)",
    )
    progress.add_argument("--step", type=int, required=True, help="steps made so far")
    progress.add_argument(
        "--step-seconds", type=_positive, help="this worker's own seconds per step lately (compute, not waiting)"
    )
    progress.add_argument(
        "--worker",
        type=int,
        help=f"this worker's rank among the job's nodes (default: {', '.join(RANK_VARIABLES)}, else 0)",
    )
    admin.register(command, admin.Lent(table, when, CliError))
    arrays.register(command, admin.Lent(table, when, CliError))
    models_cmd.register(command, admin.Lent(table, when, CliError))
    services.register(command, admin.Lent(table, when, CliError))
    return parser


def main(argv: Sequence[str] | None = None, *, sleep: Callable[[float], None] = time.sleep) -> int:
    """The ``qm`` console script. ``sleep`` is what ``follow`` waits with between polls."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit:  # --help, or a usage error argparse has explained
        return exit.code if isinstance(exit.code, int) else BAD_INPUT
    args.sleep = sleep
    try:
        settings = settings_from(args)
        return int(args.handler(args, settings, Client(settings.url, settings.token)))
    except CliError as error:
        print(f"qm: {error.message}", file=sys.stderr)
        for name, messages in error.fields.items():
            for message in _messages(messages):
                print(f"  {name}: {message}", file=sys.stderr)
        return error.status
    except KeyboardInterrupt:
        return 130


def _messages(value: Any, prefix: str = "") -> Iterator[str]:
    """Field messages, nested ones (``env: DEBUG: Not a string.``) flattened."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _messages(inner, f"{prefix}{key}: ")
    elif isinstance(value, list):
        for item in value:
            yield from _messages(item, prefix)
    else:
        yield f"{prefix}{value}"


if __name__ == "__main__":
    sys.exit(main())
