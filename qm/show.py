"""How ``qm`` shows jobs: times in this machine's zone, durations, what a job asks for and runs, ``qm show``'s
labelled lines and its attempts table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TextIO

from qm.client import WAITING


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
    asks += "; may run on spot capacity" if job.get("spot") else ""
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
