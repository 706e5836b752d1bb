"""An interactive session on Slurm: a batch job whose script starts JupyterLab on its node, reports where it
listens, and ends when JupyterLab does (docs/jobs.md, "Interactive sessions"). Pure; no I/O.

The script:

1. puts ``jupyter`` on PATH (``options["session_setup"]``, e.g. ``source /opt/jupyter/bin/activate``; empty:
   it is there already) and enters the session's **working directory**: the job's checkpoint location when it
   is a directory path (``QM_CHECKPOINT_DIR``), else ``qm-session-<job>`` under ``options["session_dir"]`` (a
   directory of the cluster's shared filesystem; ``workdir`` when unset). It is the same directory for every
   attempt of the job, so what the user saved there outlives a preemption and the session's end;
2. picks a free port on the node's address (the one its route to Quartermaster's API leaves from) and starts
   JupyterLab bound to that address with the attempt's secret (``JUPYTER_TOKEN``, from the environment: never
   on a command line, where ``ps`` shows it), with JupyterLab's own idle shutdown: the server stops after
   ``session_idle_minutes`` with no kernel and no activity (``ServerApp.shutdown_no_activity_timeout``), and
   kernels and terminals idle that long are culled first (``MappingKernelManager.cull_idle_timeout``, connected
   ones too, and ``TerminalManager.cull_inactive_timeout``), so an abandoned session is reclaimed; an open
   browser tab polls the server and counts as activity. JupyterLab signs people in with ``AUTH``, an identity
   provider written beside the job: a one-time code from the portal's link (``one_time_code`` of
   ``scheduler.actions.sessions``) or the secret in an ``Authorization`` header, never the secret in a URL;
3. once JupyterLab answers, reports its address (``options["session_url"]``, a template of ``{address}``,
   ``{node}`` and ``{port}``, where browsers reach nodes through a proxy; ``http://{address}:{port}/`` by
   default) to ``POST $QM_API_URL/api/v1/jobs/<id>/session/`` with the attempt's job token;
4. waits for JupyterLab; when it stopped itself for idleness (its log says so) reports ``{"ended": "idle"}``
   and exits 0, and the job succeeds "after N minutes idle". A SIGTERM (preemption, a cancel, the time limit)
   stops JupyterLab and exits 143.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from clusters.backends.base import InvalidJob, JobSpec

#: The session apps this script starts: JupyterLab itself, or JupyterLab opened on a terminal (a shell).
APPS = ("jupyterlab", "shell")
#: What JupyterLab logs when it stops itself for idleness (jupyter_server's ``shutdown_no_activity``).
IDLE_LINE = "seconds; shutting down"
#: How long JupyterLab has to answer after it starts.
START_TIMEOUT = 180
TEMPLATE_FIELDS = re.compile(r"\{(\w*)\}")


def is_session(spec: JobSpec) -> bool:
    return spec.kind == "session"


def url_template(options: Mapping[str, Any]) -> str:
    """The cluster's template of a session's address; ``InvalidJob`` if it names other fields than ours."""
    template = str(options.get("session_url") or "http://{address}:{port}/")
    unknown = set(TEMPLATE_FIELDS.findall(template)) - {"address", "node", "port"}
    if unknown or not template.startswith(("http://", "https://")):
        raise InvalidJob(
            "this cluster's session_url option must be an http(s) address with only {address}, {node} and {port}"
        )
    return template


def environment(spec: JobSpec) -> dict[str, str]:
    """What a session's batch job adds to its environment: the secret its app is started with."""
    return {"QM_SESSION_TOKEN": spec.session_secret} if is_session(spec) and spec.session_secret else {}


def job_number(spec: JobSpec) -> str:
    """Quartermaster's job id, the first part of the attempt's key (``<job>-<attempt>-<letters>``)."""
    return spec.id.split("-", 1)[0]


def script(spec: JobSpec, options: Mapping[str, Any]) -> str:
    """The batch script of an interactive session (see the module's docstring)."""
    if spec.session_app not in APPS:
        apps = " or ".join(APPS)
        raise InvalidJob(f"session {spec.id}: Slurm clusters run {apps} sessions, not {spec.session_app!r}")
    if spec.workers != 1:
        raise InvalidJob(f"session {spec.id} has {spec.workers} workers; a session is one")
    if not spec.session_secret:
        raise InvalidJob(f"session {spec.id} was given no secret")
    idle = max(1, spec.session_idle_minutes) * 60
    job = job_number(spec)
    if not job.isdigit():
        raise InvalidJob(f"session {spec.id}: its key does not start with Quartermaster's job id")
    template = url_template(options)
    shared = str(options.get("session_dir") or options.get("workdir") or "/tmp")  # noqa: S108
    per_job = f"{shared.rstrip('/')}/qm-session-{job}"
    setup = str(options.get("session_setup") or "").strip()
    lines = [
        "#!/bin/bash",
        f"# Quartermaster interactive session {spec.id} ({spec.session_app}): JupyterLab on this node until it has",
        f"# been idle {idle // 60} min, its time limit, or a stop.",
        "set -u",
        *([setup] if setup else []),
        # its working directory: the checkpoint location when that is a directory path, else one of its own
        'case "${QM_CHECKPOINT_DIR:-}" in /*) QM_SESSION_DIR="$QM_CHECKPOINT_DIR" ;; '
        f"*) QM_SESSION_DIR={shlex.quote(per_job)} ;; esac",
        'mkdir -p "$QM_SESSION_DIR" && cd "$QM_SESSION_DIR" '
        '|| { echo "qm: cannot use $QM_SESSION_DIR as the session\'s directory" >&2; exit 1; }',
        'echo "qm: the session works in $QM_SESSION_DIR" >&2',
        # the node's address: the one its route to Quartermaster leaves from; and a free port there
        f"QM_SESSION_ADDRESS=$(python3 - <<'QM_END'\n{ADDRESS}\nQM_END\n)",
        f'QM_SESSION_PORT=$(python3 -c {shlex.quote(FREE_PORT)} "$QM_SESSION_ADDRESS")',
        f"QM_SESSION_URL=$(python3 -c {shlex.quote(FILL)} {shlex.quote(template)} "
        '"$QM_SESSION_ADDRESS" "$(hostname -s)" "$QM_SESSION_PORT")',
        "export QM_SESSION_ADDRESS QM_SESSION_PORT",
        'QM_SESSION_LOG="${TMPDIR:-/tmp}/qm-session-$SLURM_JOB_ID.log"',
        # how JupyterLab signs people in (``AUTH``), in a directory only this job's user may read
        'QM_SESSION_AUTH=$(mktemp -d) || { echo "qm: cannot make a temporary directory" >&2; exit 1; }',
        f"cat >\"$QM_SESSION_AUTH/{AUTH_MODULE}.py\" <<'QM_END'\n{AUTH}\nQM_END",
        # the secret from the environment only; Jupyter reads JUPYTER_TOKEN itself
        'JUPYTER_TOKEN="$QM_SESSION_TOKEN" PYTHONPATH="$QM_SESSION_AUTH${PYTHONPATH:+:$PYTHONPATH}" '
        'jupyter lab --no-browser --ip="$QM_SESSION_ADDRESS" '
        f"--ServerApp.identity_provider_class={AUTH_MODULE}.OneTimeCode "
        '--port="$QM_SESSION_PORT" --port-retries=0 --ServerApp.root_dir="$QM_SESSION_DIR" '
        "--ServerApp.allow_remote_access=True --ServerApp.open_browser=False "
        # nothing fetched from the internet while it runs (the extension manager searches PyPI; the news feed);
        # root only where the cluster runs jobs as root (the lab)
        '--LabApp.extension_manager=readonly --LabApp.news_url=None $([ "$(id -u)" = 0 ] && echo --allow-root) '
        f"--ServerApp.shutdown_no_activity_timeout={idle} "
        f"--MappingKernelManager.cull_idle_timeout={idle} --MappingKernelManager.cull_interval=60 "
        "--MappingKernelManager.cull_connected=True "
        f"--TerminalManager.cull_inactive_timeout={idle} --TerminalManager.cull_interval=60 "
        '>"$QM_SESSION_LOG" 2>&1 &',
        "QM_SESSION_PID=$!",
        "trap 'kill -TERM $QM_SESSION_PID 2>/dev/null; wait $QM_SESSION_PID; exit 143' TERM",
        f'python3 - "$QM_SESSION_URL" {START_TIMEOUT} "$QM_SESSION_PID" <<\'QM_END\' '
        '|| { echo "qm: JupyterLab did not start:" >&2; cat "$QM_SESSION_LOG" >&2; '
        "kill $QM_SESSION_PID 2>/dev/null; exit 1; }",
        WAIT_FOR_APP,
        "QM_END",
        f"qm_session_report() {{ python3 - \"$1\" {job} <<'QM_END'",
        REPORT,
        "QM_END",
        "}",
        'qm_session_report "$(python3 -c \'import json, sys; print(json.dumps({"url": sys.argv[1]}))\' '
        '"$QM_SESSION_URL")" || echo "qm: could not report the session\'s address" >&2',
        'echo "qm: the session listens at $QM_SESSION_URL" >&2',
        "wait $QM_SESSION_PID; QM_EXIT=$?",
        f'if [ "$QM_EXIT" = 0 ] && grep -q {shlex.quote(IDLE_LINE)} "$QM_SESSION_LOG"; then',
        f'  echo "qm: the session ended after {idle // 60} min idle" >&2',
        "  qm_session_report " + shlex.quote(json.dumps({"ended": "idle"})) + " || true",
        "fi",
        'cat "$QM_SESSION_LOG" >&2; rm -f "$QM_SESSION_LOG"; rm -rf "$QM_SESSION_AUTH"',
        'exit "$QM_EXIT"',
    ]
    return "\n".join(lines) + "\n"


#: The address this node reaches Quartermaster's API from (a UDP "connection" sends nothing); 127.0.0.1 when the
#: API is on this machine, the first address of ``hostname -I`` when its name does not resolve.
ADDRESS = """import os, socket, subprocess, urllib.parse
host = urllib.parse.urlsplit(os.environ.get("QM_API_URL", "")).hostname or "127.0.0.1"
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((socket.gethostbyname(host), 9))
    print(s.getsockname()[0])
except OSError:
    print((subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split() or ["127.0.0.1"])[0])"""

#: A free TCP port on the given address (the kernel's choice).
FREE_PORT = "import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])"

#: The session's address from the cluster's template.
FILL = "import sys; print(sys.argv[1].format(address=sys.argv[2], node=sys.argv[3], port=sys.argv[4]))"

#: The module of ``AUTH`` (on JupyterLab's PYTHONPATH).
AUTH_MODULE = "qm_session_auth"
#: JupyterLab's identity provider: who opens the portal's link (``?qm_code=<expiry>.<nonce>.<HMAC-SHA256 keyed by
#: the secret>``, ``scheduler.actions.sessions.one_time_code``) is signed in (JupyterLab's cookie) if the code is good,
#: unexpired (a minute of clock skew allowed) and not used before; a program may send the secret in an
#: ``Authorization: token`` header. A ``?token=`` in a URL signs in nobody.
AUTH = """import hashlib, hmac, time
from jupyter_server.auth.identity import IdentityProvider

SKEW = 60


class OneTimeCode(IdentityProvider):
    used = {}

    def get_token(self, handler):
        code = handler.get_argument("qm_code", "")
        if code:
            return self.token if self.redeem(code, time.time()) else ""
        match = self.auth_header_pat.match(handler.request.headers.get("Authorization", ""))
        return match.group(2) if match else ""

    def redeem(self, code, now):
        expires, _, rest = code.partition(".")
        nonce, _, mac = rest.partition(".")
        if not (expires.isdigit() and nonce and mac and self.token) or not now <= int(expires) + SKEW:
            return False
        good = hmac.new(self.token.encode(), (expires + "." + nonce).encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(good, mac):
            return False
        for old in [n for n, until in self.used.items() if until < now]:
            del self.used[old]
        if nonce in self.used:
            return False
        self.used[nonce] = int(expires) + SKEW
        return True"""

#: Wait until JupyterLab answers ``api/status`` with the secret, at most argv[2] seconds, while it runs.
WAIT_FOR_APP = """import os, sys, time, urllib.request
url, deadline, pid = sys.argv[1], time.time() + int(sys.argv[2]), int(sys.argv[3])
local = "http://" + os.environ["QM_SESSION_ADDRESS"] + ":" + os.environ["QM_SESSION_PORT"] + "/api/status"
request = urllib.request.Request(local, headers={"Authorization": "token " + os.environ["QM_SESSION_TOKEN"]})
while time.time() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(1)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            if answer.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(1)
sys.exit(1)"""


def report_program(route: str, what: str) -> str:
    """A program that POSTs argv[1] (JSON) to ``/api/v1/jobs/<argv[2]>/<route>/`` with the job's token; three
    tries, each failure logged as reporting ``what``. Sessions and service replicas report with it."""
    return f"""import os, sys, time, urllib.request
url = os.environ["QM_API_URL"].rstrip("/") + "/api/v1/jobs/" + sys.argv[2] + "/{route}/"
headers = {{"Authorization": "Bearer " + os.environ["QM_JOB_TOKEN"], "Content-Type": "application/json"}}
for attempt in range(3):
    try:
        request = urllib.request.Request(url, data=sys.argv[1].encode(), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            sys.exit(0)
    except OSError as error:
        print("qm: reporting {what}:", error, file=sys.stderr)
        time.sleep(2)
sys.exit(1)"""


#: POST argv[1] (JSON) to the job's session endpoint with its token; three tries.
REPORT = report_program("session", "the session")
