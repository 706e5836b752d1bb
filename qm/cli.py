"""``qm``: the command-line client of the Quartermaster API (submit, list, show, follow and cancel jobs;
admins preempt and requeue them, and look after clusters, nodes and maintenance: ``qm/admin.py``, and elastic
pools: ``qm/pools.py``; inside a job, report its checkpoints).

It talks to the REST API only (``/api/v1/``) with a personal API token, and imports nothing of Django, so
it runs on any machine with ``requests`` and PyYAML. Where it finds the server and the token, first match
wins: ``--url`` / ``--token``, then ``QM_URL`` / ``QM_TOKEN``, then the file ``qm login`` writes
(``$XDG_CONFIG_HOME/quartermaster/config.yaml``, mode 0600; its token is sent only to the URL it was issued
by). Exit status: 0 done, 1 refused or failed (and ``follow`` of a job that did not succeed), 2 bad input.
The token is never printed. ``qm checkpoint`` is the exception to all of this: it runs inside a job and
reads what Quartermaster started the job with (``QM_API_URL``, ``QM_JOB_TOKEN``, ``QM_JOB_ID``) instead.

The job commands are here with the argument parser of every command (``build_parser``); the other commands live in
their own modules (``qm/admin.py``, ``qm/arrays.py``, ``qm/services.py``, ``qm/models_cmd.py``), how jobs are shown
in ``qm/show.py``, job files in ``qm/jobfile.py``, and the API client in ``qm/client.py``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import platform
import re
import sys
import time
import webbrowser
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from qm import admin, arrays, capacity, finance, models_cmd, planning, pools, queues, services
from qm.client import (
    BAD_INPUT,
    DEFAULT_URL,
    FAILED,
    FINAL,
    OK,
    Client,
    CliError,
    Settings,
    field_messages,
    save_config,
    settings_from,
)
from qm.jobfile import JobFile, load_job_file, read_runtime_env
from qm.show import describe, event_line, note, resources, table, when

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
        fields["runtime_env"] = read_runtime_env(args.runtime_env)
    return fields


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
    queues.register(command, admin.Lent(table, when, CliError))
    capacity.register(command, admin.Lent(table, when, CliError))
    pools.register(command, admin.Lent(table, when, CliError))
    finance.register(command, admin.Lent(table, when, CliError))
    planning.register(command, admin.Lent(table, when, CliError))
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
            for message in field_messages(messages):
                print(f"  {name}: {message}", file=sys.stderr)
        return error.status
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
