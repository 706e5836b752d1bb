#!/usr/bin/env python3
"""Quartermaster device agent: keeps a robot (or any edge device) running the model version the portal wants.

Python 3.11+ and its standard library only. It enrols once with a one-time token (the device credential it
gets back is saved, mode 0600, in the state directory), then loops: long-polls the portal for the device's
desired state; when that differs from what runs, downloads the artifact resumably, verifies its size and
SHA-256, switches to it atomically, runs the health check and reports each step. The protocol is in
docs/device-agent.md; the state directory holds everything the agent knows, so a restart (a crash, a power
cut, SIGKILL) resumes where it was:

    credential.json          {"device": id, "name": ..., "credential": "qmdev_..."} (0600)
    state.json               {"running": version | null, "previous": version | null, "health": ..., ...}
    current -> versions/<sha256>   the model the device runs (a symlink, replaced with os.replace)
    versions/<sha256>        verified artifacts: the running one and the previous one (for rollback)
    partial/<sha256>.part    a download in progress; resumed with an HTTP Range from the bytes it holds

state.json is the truth and written first (atomically); the ``current`` link is made to follow it on start.
A version is never switched to unless its bytes hash to the version's SHA-256. A version that failed its
health check (or its checksum) in a rollout is not tried again in that rollout; the agent switched back to
its previous version and said so. Connection errors, 5xx answers and truncated downloads are retried with
exponential backoff and jitter (``--backoff-max``); the agent does not exit on them.

    python3 edge_agent.py --server https://qm.example.org --state-dir /var/lib/qm-agent \\
        --enrol-token <token> --name robot-07 [--health-command CMD] [--poll-wait 30] [--once]

Size: the device agent is one file on purpose: it is copied onto a robot as it is, with no package and no Django.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import http.client
import ipaddress
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

AGENT_VERSION = "1.0.0"
API = "/api/v1/edge/"
CHUNK = 1 << 16
DETAIL_LIMIT = 500


class Transient(Exception):
    """The server could not be reached or failed (connection error, timeout, 5xx, a truncated body): retry later."""


class Refused(Exception):
    """The server answered 4xx; ``status`` and ``body`` say why."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


def log(name: str, message: str) -> None:
    """One line per step, to stderr (journald keeps it under systemd)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    print(f"{stamp} edge-agent {name}: {message}", file=sys.stderr, flush=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, fsynced, renamed over it."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(temporary, mode)
    os.replace(temporary, path)
    fsync_directory(path.parent)


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Client:
    """The portal's device API over urllib; remembers the round-trip time of its last short call."""

    def __init__(self, server: str, timeout: float = 30) -> None:
        self.server = server.rstrip("/")
        self.credential = ""
        self.timeout = timeout
        self.rtt_ms: float | None = None

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"qm-edge-agent/{AGENT_VERSION}"}
        if self.credential:
            headers["Authorization"] = f"Device {self.credential}"
        return headers

    def open(self, path: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 0) -> Any:
        """The response (to be closed by the caller) for ``path``; raises Transient or Refused."""
        data = None if body is None else json.dumps(body).encode()
        all_headers = self.headers() | (headers or {})
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.server + path, data=data, headers=all_headers)  # noqa: S310
        try:
            return urllib.request.urlopen(request, timeout=timeout or self.timeout)  # noqa: S310 - the portal's URL
        except urllib.error.HTTPError as answer:
            try:
                text = answer.read().decode(errors="replace")
            except (OSError, http.client.HTTPException):
                text = ""
            if answer.code >= 500:
                raise Transient(f"HTTP {answer.code} from {path}") from None
            try:
                parsed: Any = json.loads(text)
            except ValueError:
                parsed = text[:200]
            raise Refused(answer.code, parsed) from None
        except (OSError, http.client.HTTPException) as failure:  # URLError is an OSError; so are timeouts
            raise Transient(f"{path}: {failure}") from None

    def call(self, path: str, body: Any = None, timeout: float = 0, measure: bool = True) -> Any:
        started = time.monotonic()
        try:
            with self.open(path, body, timeout=timeout) as answer:
                payload = answer.read()
        except (OSError, http.client.HTTPException) as failure:
            raise Transient(f"{path}: {failure}") from None
        if measure:
            self.rtt_ms = round((time.monotonic() - started) * 1000, 1)
        try:
            return json.loads(payload)
        except ValueError:
            raise Transient(f"{path}: not JSON") from None


def inventory() -> tuple[dict[str, Any], dict[str, Any]]:
    """(hardware, software) as the protocol describes them."""
    accelerator = "none"
    if smi := shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            names = subprocess.run(  # noqa: S603 - nvidia-smi from PATH, fixed arguments
                [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
            ).stdout.split("\n")
            accelerator = ", ".join(n.strip() for n in names if n.strip()) or "none"
    memory_mb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_mb = int(line.split()[1]) // 1024
    os_name = platform.platform()
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip().strip('"')
    hardware = {"accelerator": accelerator, "memory_mb": memory_mb, "machine": platform.machine()}
    software = {"os": os_name, "python": platform.python_version(), "agent": AGENT_VERSION}
    return hardware, software


def network_kind(server: str) -> str:
    """ "loopback", "wifi" or "ethernet": what the device reaches the server through (best effort)."""
    host = urllib.parse.urlsplit(server).hostname or ""
    with contextlib.suppress(OSError, ValueError):
        address = socket.getaddrinfo(host, None)[0][4][0]
        if ipaddress.ip_address(address).is_loopback:
            return "loopback"
    with contextlib.suppress(OSError, IndexError):
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1] == "00000000":  # the default route's interface
                return "wifi" if Path(f"/sys/class/net/{fields[0]}/wireless").exists() else "ethernet"
    return "unknown"


class State:
    """What this device runs (state.json), saved atomically after every change."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "state.json"
        self.running: dict[str, Any] | None = None
        self.previous: dict[str, Any] | None = None
        self.health = ""  # of the running version: "switched" (not checked yet) or "healthy"
        self.failed: list[str] = []  # rollout:version:sha256 keys not to try again
        if self.path.exists():
            saved = json.loads(self.path.read_text())
            self.running, self.previous = saved.get("running"), saved.get("previous")
            self.health, self.failed = saved.get("health", ""), list(saved.get("failed", []))

    def save(self) -> None:
        body = {"running": self.running, "previous": self.previous, "health": self.health, "failed": self.failed[-50:]}
        write_atomically(self.path, json.dumps(body, indent=1).encode())


def brief(version: dict[str, Any] | None) -> dict[str, Any] | None:
    """A version as a report's ``running``/``previous`` carries it."""
    return None if version is None else {"version_id": version["version_id"], "sha256": version["sha256"]}


def label(version: dict[str, Any] | None) -> str:
    if version is None:
        return "nothing"
    return f"{version.get('model', '?')} version {version.get('version', '?')} (id {version['version_id']})"


class Agent:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.folder = Path(options.state_dir)
        for sub in ("versions", "partial"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        self.lock = (self.folder / "agent.lock").open("w")
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SystemExit(f"another agent runs with state directory {self.folder}") from None
        self.client = Client(options.server)
        self.name = options.name or "device"
        self.state = State(self.folder)
        self.inventory_sent = False
        self.reported: tuple[str, str] = ("", "")  # (revision, status) last reported, not to repeat it
        self.refused_noted: set[str] = set()

    def say(self, message: str) -> None:
        log(self.name, message)

    # Enrolment ------------------------------------------------------------------------------------------------
    def enrol(self) -> None:
        saved = self.folder / "credential.json"
        if saved.exists() and not self.options.enrol_token:
            stored = json.loads(saved.read_text())
            self.client.credential, self.name = stored["credential"], stored.get("name", self.name)
            return
        if saved.exists():  # a token given again: a re-imaged device (or a revoked one) enrols anew
            stored = json.loads(saved.read_text())
            if stored.get("token") == self.options.enrol_token:  # already used by this very agent
                self.client.credential, self.name = stored["credential"], stored.get("name", self.name)
                return
        if not (self.options.enrol_token and self.options.name):
            raise SystemExit("not enrolled yet: give --enrol-token and --name")
        hardware, software = inventory()
        body = {
            "token": self.options.enrol_token,
            "name": self.options.name,
            "hardware": hardware,
            "software": software,
        }
        answer = self.client.call(API + "enrol", body)
        self.client.credential = answer["credential"]
        record = {"device": answer["device"], "name": answer["name"], "credential": answer["credential"]}
        record["token"] = self.options.enrol_token
        write_atomically(saved, json.dumps(record).encode(), mode=0o600)
        self.say(f"enrolled as device {answer['device']} ({answer['name']})")

    # Reports --------------------------------------------------------------------------------------------------
    def report(self, status: str, version_id: int | None, detail: str = "", revision: str = "") -> None:
        body: dict[str, Any] = {
            "status": status,
            "version_id": version_id,
            "running": brief(self.state.running),
            "previous": brief(self.state.previous),
            "detail": detail[:DETAIL_LIMIT],
            "connectivity": {"network": network_kind(self.client.server), "rtt_ms": self.client.rtt_ms},
        }
        if not self.inventory_sent:
            body["hardware"], body["software"] = inventory()
        self.client.call(API + "report", body)
        self.inventory_sent = True
        self.reported = (revision, status)
        self.say(f"reported {status}" + (f" for version id {version_id}" if version_id else "") + f": {detail}")

    def report_once(self, revision: str, status: str, version_id: int | None, detail: str) -> None:
        if self.reported != (revision, status):
            self.report(status, version_id, detail, revision)

    # The link and the state -----------------------------------------------------------------------------------
    def recover(self) -> None:
        """Make the ``current`` link follow state.json (a crash may have come between the two)."""
        link = self.folder / "current"
        running = self.state.running
        want = f"versions/{running['sha256']}" if running else None
        have = os.readlink(link) if link.is_symlink() else None
        if want != have:
            self.say(f"recovering: current pointed at {have}, state says {want}")
            self.point_at(running)

    def point_at(self, version: dict[str, Any] | None) -> None:
        link = self.folder / "current"
        if version is None:
            link.unlink(missing_ok=True)
        else:
            fresh = self.folder / "current.new"
            fresh.unlink(missing_ok=True)
            os.symlink(f"versions/{version['sha256']}", fresh)
            os.replace(fresh, link)
        fsync_directory(self.folder)

    def verified(self, version: dict[str, Any]) -> Path | None:
        """The stored file of ``version`` if its bytes still hash to its SHA-256 (else removed)."""
        path: Path = self.folder / "versions" / str(version["sha256"])
        if not path.exists():
            return None
        if path.stat().st_size == version["size_bytes"] and sha256_of(path) == version["sha256"]:
            return path
        self.say(f"stored {label(version)} no longer matches its sha256: removed")
        path.unlink()
        return None

    def prune(self, downloading: str = "") -> None:
        """Keep the running and previous versions (and the download in progress); remove the rest."""
        keep = {v["sha256"] for v in (self.state.running, self.state.previous) if v}
        for path in (self.folder / "versions").iterdir():
            if path.name not in keep:
                path.unlink()
                self.say(f"pruned version {path.name[:12]}")
        for path in (self.folder / "partial").iterdir():
            if path.name != f"{downloading}.part":
                path.unlink()

    # Converging on the desired state --------------------------------------------------------------------------
    def converge(self, answer: dict[str, Any]) -> bool:
        """Act on one desired-state answer; True when it is dealt with (the next poll may wait for a change)."""
        revision, desired, rollout = str(answer.get("revision", "")), answer.get("desired"), answer.get("rollout")
        running = self.state.running
        if desired is None:
            if running is not None:
                self.say(f"desired state is none: stopping {label(running)}")
                self.state.previous, self.state.running, self.state.health = running, None, ""
                self.state.save()
                self.point_at(None)
                self.prune()
            self.report_once(revision, "idle", None, "nothing to run")
            return True
        target = {key: desired[key] for key in ("version_id", "sha256", "size_bytes", "version", "model")}
        key = f"{rollout}:{target['version_id']}:{target['sha256']}"
        if running is not None and running["sha256"] == target["sha256"]:
            if running["version_id"] != target["version_id"]:  # the same bytes published again: nothing to fetch
                self.state.running = target
                self.state.save()
            if self.state.health != "healthy":  # restarted between the switch and its health check
                return self.check(target, revision, key)
            self.report_once(revision, "healthy", target["version_id"], f"running {label(target)}")
            return True
        if key in self.state.failed:
            if key not in self.refused_noted:
                self.refused_noted.add(key)
                self.say(f"not trying {label(target)} again in this rollout: it failed here")
            return True
        path = self.verified(target) or self.download(target, desired["url"], revision, key)
        if path is None:
            return key in self.state.failed  # a checksum mismatch is dealt with; a vanished version is not
        self.switch(target, revision)
        return self.check(target, revision, key)

    def switch(self, target: dict[str, Any], revision: str) -> None:
        was = self.state.running
        if was is not None:
            self.state.previous = was
        elif self.state.previous and self.state.previous["sha256"] == target["sha256"]:
            self.state.previous = None  # back to what ran before a stop: there is nothing older to keep
        self.state.running, self.state.health = target, "switched"
        self.state.save()
        self.point_at(target)
        self.report("switched", target["version_id"], f"from {label(was)} to {label(target)}", revision)

    def check(self, target: dict[str, Any], revision: str, key: str) -> bool:
        healthy, detail = self.health_check(target)
        if healthy:
            self.state.health = "healthy"
            self.state.save()
            self.prune()
            self.report("healthy", target["version_id"], detail or f"running {label(target)}", revision)
            return True
        back = self.state.previous
        if back is not None and self.verified(back) is None:
            self.say(f"previous {label(back)} is not stored intact: nothing to switch back to")
            back = None
        self.state.running, self.state.previous, self.state.health = back, None, "healthy" if back else ""
        self.state.failed.append(key)
        self.state.save()
        self.point_at(back)
        self.prune()
        self.say(f"{label(target)} failed its health check; switched back to {label(back)}")
        self.report("unhealthy", target["version_id"], detail, revision)
        return True

    def health_check(self, target: dict[str, Any]) -> tuple[bool, str]:
        """(healthy, detail): the operator's command with QM_MODEL_PATH, or the file's own checksum."""
        path = self.folder / "current"
        if not self.options.health_command:
            ok = path.exists() and sha256_of(path) == target["sha256"]
            return ok, "" if ok else "the model file is missing or does not match its sha256"
        env = os.environ | {"QM_MODEL_PATH": str(path.resolve()), "QM_MODEL_SHA256": target["sha256"]}
        self.say(f"health check: {self.options.health_command}")
        try:
            done = subprocess.run(  # noqa: S602 - the operator's own health command, from the command line
                self.options.health_command,
                shell=True,
                env=env,
                capture_output=True,
                text=True,
                timeout=self.options.health_timeout,
            )
        except subprocess.TimeoutExpired:
            return False, f"the health check ran past {self.options.health_timeout} s"
        output = (done.stdout + done.stderr).strip()[-300:]
        if done.returncode == 0:
            return True, output
        return False, f"health check exited {done.returncode}: {output}"

    # Downloading ----------------------------------------------------------------------------------------------
    def download(self, target: dict[str, Any], url: str, revision: str, key: str) -> Path | None:
        """The verified file of ``target``, fetched into partial/ from where an earlier try stopped; None when
        the bytes do not match (reported checksum_mismatch) or the server no longer offers them."""
        sha, size, vid = target["sha256"], int(target["size_bytes"]), target["version_id"]
        self.prune(downloading=sha)
        part = self.folder / "partial" / f"{sha}.part"
        have = part.stat().st_size if part.exists() else 0
        if have > size:
            part.unlink()
            have = 0
        if have < size:
            try:
                self.fetch(part, url, have, size, vid, revision)
            except Refused as refusal:
                self.say(f"the server does not offer {label(target)} now ({refusal}); asking again")
                return None
            except Transient as failure:
                self.say(f"download of {label(target)} failed: {failure}")
                with contextlib.suppress(Transient, Refused):
                    self.report("download_failed", vid, str(failure), revision)
                raise
        self.report("verifying", vid, f"{size} bytes", revision)
        got_size, got_sha = part.stat().st_size, sha256_of(part)
        if got_size != size or got_sha != sha:
            part.unlink()
            self.state.failed.append(key)
            self.state.save()
            detail = f"got {got_size} bytes with sha256 {got_sha}, expected {size} bytes with sha256 {sha}"
            self.say(f"checksum mismatch for {label(target)}: {detail}; not switching")
            self.report("checksum_mismatch", vid, detail, revision)
            return None
        final: Path = self.folder / "versions" / str(sha)
        os.replace(part, final)
        fsync_directory(final.parent)
        self.say(f"verified {label(target)}: {size} bytes, sha256 {sha[:12]}")
        return final

    def fetch(self, part: Path, url: str, have: int, size: int, version_id: int, revision: str) -> None:
        headers = {"Range": f"bytes={have}-"} if have else {}
        if have:
            self.say(f"resuming at {have} of {size} bytes (version id {version_id})")
        else:
            self.say(f"downloading {size} bytes (version id {version_id})")
        self.report("downloading", version_id, f"from byte {have}", revision)
        try:
            answer = self.client.open(url, headers=headers, timeout=self.options.download_timeout)
        except Refused as refusal:
            if refusal.status != 416:
                raise
            part.unlink(missing_ok=True)  # our partial file is not a prefix the server can continue
            raise Transient("range not satisfiable: starting over") from None
        with answer:
            if answer.status == 206 and have:
                start = answer.headers.get("Content-Range", "").removeprefix("bytes ").split("-")[0]
                if start != str(have):
                    raise Transient(f"the server answered range {start}, asked for {have}")
                mode = "ab"
            else:
                if have:
                    self.say(f"the server sent the whole file (HTTP {answer.status}): starting over")
                mode, have = "wb", 0
            self.copy(answer, part, mode, have, size)

    def copy(self, answer: Any, part: Path, mode: str, have: int, size: int) -> None:
        rate, started, received = self.options.max_rate, time.monotonic(), 0
        with part.open(mode) as out:
            try:
                while chunk := answer.read(CHUNK):
                    out.write(chunk)
                    received += len(chunk)
                    if rate and (ahead := received / rate - (time.monotonic() - started)) > 0:
                        out.flush()
                        time.sleep(ahead)
            except (OSError, http.client.HTTPException) as failure:
                raise Transient(f"the download broke off after {have + received} bytes: {failure}") from None
            finally:
                out.flush()
                os.fsync(out.fileno())
        if have + received < size:
            raise Transient(f"the download ended early at {have + received} of {size} bytes")

    # The loop -------------------------------------------------------------------------------------------------
    def backoff(self, failures: int) -> float:
        ceiling: float = min(float(self.options.backoff_max), 0.5 * 2 ** min(failures, 16))
        return ceiling * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not a secret

    def poll(self, known: str, wait: int) -> dict[str, Any]:
        query = urllib.parse.urlencode({"known": known, "wait": wait})
        answer: dict[str, Any] = self.client.call(f"{API}desired?{query}", timeout=wait + 30, measure=not known)
        return answer

    def run(self) -> int:
        failures, known = 0, ""
        while True:
            try:
                if not self.client.credential:
                    self.enrol()
                    self.recover()
                wait = 0 if self.options.once or not known else self.options.poll_wait
                started = time.monotonic()
                answer = self.poll(known, wait)
                done = self.converge(answer)
                failures = 0
                if self.options.once:
                    return 0
                unchanged = done and str(answer.get("revision")) == known
                known = str(answer.get("revision", "")) if done else ""
                if unchanged and time.monotonic() - started < max(1.0, wait / 2):
                    time.sleep(float(answer.get("poll_seconds") or 10))  # the server did not hold the poll
                elif not done:
                    time.sleep(self.backoff(1))
            except Transient as failure:
                failures += 1
                delay = self.backoff(failures)
                self.say(f"{failure}; retrying in {delay:.1f} s")
                if self.options.once:
                    return 1
                time.sleep(delay)
            except Refused as refusal:
                failures += 1
                if refusal.status == 401:
                    self.say("the server refused the device credential (revoked?); enrol again with a new token")
                else:
                    self.say(f"the server refused a request: {refusal}")
                if self.options.once:
                    return 2
                known = ""
                time.sleep(self.options.backoff_max if refusal.status == 401 else self.backoff(failures))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--server", required=True, help="the portal's base URL, e.g. https://qm.example.org")
    parser.add_argument("--state-dir", required=True, help="where the credential, state and models are kept")
    parser.add_argument("--enrol-token", default="", help="a one-time enrolment token (first start only)")
    parser.add_argument("--name", default="", help="the device's name in its team (with --enrol-token)")
    parser.add_argument("--health-command", default="", help="run after a switch with QM_MODEL_PATH; exit 0 = healthy")
    parser.add_argument("--health-timeout", type=float, default=120, help="seconds before a health check fails")
    parser.add_argument("--poll-wait", type=int, default=30, help="seconds the server may hold a poll (0..60)")
    parser.add_argument("--backoff-max", type=float, default=60, help="the longest wait between retries, seconds")
    parser.add_argument("--max-rate", type=int, default=0, help="download at most this many bytes/s (0: no limit)")
    parser.add_argument("--download-timeout", type=float, default=60, help="seconds without bytes before retrying")
    parser.add_argument("--once", action="store_true", help="poll and act once, then exit (0: done)")
    options = parser.parse_args(argv)
    if not 0 <= options.poll_wait <= 60:
        parser.error("--poll-wait must be between 0 and 60")
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    agent = Agent(options)
    agent.say(f"agent {AGENT_VERSION} starting; server {options.server}, state in {options.state_dir}")
    signal.signal(signal.SIGTERM, stop)  # systemd's stop: end between steps' writes, a health check killed
    try:
        return agent.run()
    except KeyboardInterrupt:
        agent.say("stopped")
        return 0


def stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
