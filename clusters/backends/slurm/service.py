"""A service replica's program, as a POSIX shell script: it starts the replica's command on a port of the node,
waits until its health path answers, reports where it listens, and runs until it is stopped (docs/jobs.md,
"Service replicas"). The Slurm backend submits it as the batch script; the simulated backend runs the same
script with ``/bin/sh`` on this machine. Pure; no I/O.

The script:

1. finds the node's **address**: the one its route to Quartermaster's API (``$QM_API_URL``) leaves from, as an
   interactive session does (``session.ADDRESS``), or the one it is given (the simulated cluster: 127.0.0.1);
2. takes the replica's **port** (``serve_port``), or, when that is 0, a free port on that address (the kernel's
   choice), and exports it as ``$PORT``. The command's words are not expanded by a shell, except ``$PORT``
   and ``${PORT}``, which become the port (``python3 -m http.server $PORT``);
3. starts the command in the background and waits until ``http://<address>:<port><health path>`` answers 2xx,
   at most ``START_TIMEOUT`` seconds while the program lives (else it stops it and exits 1, its log said);
4. reports ``{"url": "http://<address>:<port>/"}`` to ``POST $QM_API_URL/api/v1/jobs/<id>/endpoint/`` with the
   attempt's job token (three tries; a replica that cannot report still runs, and says so in its output);
5. waits on the program and exits with its code. A SIGTERM (a cancel, a drain, preemption) is passed on to the
   program, and the script exits 143 once it has ended.

A replica has no time limit of its own: it runs until it is stopped (``JobSpec.time_limit`` is 0 for it).
"""

from __future__ import annotations

import re
import shlex

from clusters.backends.base import InvalidJob, JobSpec
from clusters.backends.slurm.session import ADDRESS, FREE_PORT, job_number, report_program

#: How long a replica's program has to answer on its health path after it starts, in seconds.
START_TIMEOUT = 300
#: ``$PORT`` and ``${PORT}`` in a command's words: replaced by the port (the only expansion made).
PORT_WORD = re.compile(r"\$\{PORT\}|\$PORT\b")
#: Marks the end of the here-documents of the script's Python parts.
END = "QM_END"


def is_service(spec: JobSpec) -> bool:
    return spec.kind == "service"


def command_line(command: tuple[str, ...] | list[str]) -> str:
    """The command as one shell line: every word quoted, ``$PORT`` and ``${PORT}`` left for the shell."""
    words = []
    for word in command:
        parts = PORT_WORD.split(word)
        words.append('"$PORT"'.join(shlex.quote(part) if part else "" for part in parts) or "''")
    return " ".join(words)


def script(spec: JobSpec, *, address: str = "") -> str:
    """The replica's script (the module's docstring); ``address``: the node's address when the caller knows it
    ("": found from the route to ``$QM_API_URL``)."""
    if spec.workers != 1:
        raise InvalidJob(f"service replica {spec.id} has {spec.workers} workers; a replica is one")
    if not spec.command:
        raise InvalidJob(f"service replica {spec.id} has no command to run")
    if not 0 <= spec.serve_port <= 65535:
        raise InvalidJob(f"service replica {spec.id}: port {spec.serve_port} is not 0 to 65535")
    health = spec.serve_health_path or "/"
    if not health.startswith("/") or any(c.isspace() for c in health):
        raise InvalidJob(f"service replica {spec.id}: its health path must start with / and hold no spaces")
    job = job_number(spec)
    if not job.isdigit():
        raise InvalidJob(f"service replica {spec.id}: its key does not start with Quartermaster's job id")
    if any(END in word for word in spec.command):
        raise InvalidJob(f"service replica {spec.id}: its command contains {END}, which Quartermaster reserves")
    find_address = f"QM_SERVE_ADDRESS=$(python3 - <<'{END}'\n{ADDRESS}\n{END}\n)"
    port = (
        f"PORT={spec.serve_port}"
        if spec.serve_port
        else f'PORT=$(python3 -c {shlex.quote(FREE_PORT)} "$QM_SERVE_ADDRESS")'
    )
    lines = [
        "#!/bin/sh",
        f"# Quartermaster service replica {spec.id}: serves HTTP on this node until it is stopped.",
        "set -u",
        f"QM_SERVE_ADDRESS={shlex.quote(address)}" if address else find_address,
        port,
        '[ -n "$PORT" ] || { echo "qm: no free port on $QM_SERVE_ADDRESS" >&2; exit 1; }',
        "export PORT QM_SERVE_ADDRESS",
        'QM_SERVE_URL="http://$QM_SERVE_ADDRESS:$PORT/"',
        f'echo "qm: starting the replica on $QM_SERVE_ADDRESS port $PORT (health {health})" >&2',
        f"{command_line(spec.command)} &",
        "QM_SERVE_PID=$!",
        "trap 'kill -TERM $QM_SERVE_PID 2>/dev/null; wait $QM_SERVE_PID; exit 143' TERM INT",
        f'python3 - "http://$QM_SERVE_ADDRESS:$PORT"{shlex.quote(health)} {START_TIMEOUT} "$QM_SERVE_PID" '
        f"<<'{END}' || {{ echo \"qm: the replica did not answer on {health} within {START_TIMEOUT} s\" >&2; "
        "kill -TERM $QM_SERVE_PID 2>/dev/null; wait $QM_SERVE_PID; exit 1; }",
        WAIT_FOR_HEALTH,
        END,
        f'python3 - "{{\\"url\\": \\"$QM_SERVE_URL\\"}}" {job} <<\'{END}\' '
        '|| echo "qm: could not report the replica\'s address" >&2',
        REPORT,
        END,
        'echo "qm: the replica listens at $QM_SERVE_URL" >&2',
        "wait $QM_SERVE_PID; QM_EXIT=$?",
        'echo "qm: the replica exited with code $QM_EXIT" >&2',
        'exit "$QM_EXIT"',
    ]
    return "\n".join(lines) + "\n"


#: Wait until argv[1] answers 2xx, at most argv[2] seconds, while process argv[3] lives.
WAIT_FOR_HEALTH = """import os, sys, time, urllib.error, urllib.request
url, deadline, pid = sys.argv[1], time.time() + int(sys.argv[2]), int(sys.argv[3])
said = ""
def ended():
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as stat:  # a program that ended waits as a zombie for the script
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return os.path.isdir("/proc/self")  # gone since; without /proc it cannot be told
while time.time() < deadline:
    if ended():
        print("qm: the replica's program ended before it answered", file=sys.stderr)
        sys.exit(1)
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            if 200 <= answer.status < 300:
                sys.exit(0)
    except urllib.error.HTTPError as error:
        if said != str(error.code):
            said = str(error.code)
            print("qm: the health check answered", error.code, file=sys.stderr)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit(1)"""

#: POST argv[1] (JSON: ``{"url": ...}``) to the job's endpoint route with its token; three tries.
REPORT = report_program("endpoint", "the replica's address")
