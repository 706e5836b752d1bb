"""A phased rollout to a fleet of real device agents (``deploy/edge_agent.py``) on loopback, for the agents' test
(``tests/edge/test_agents.py``) and ``manage.py bench_rollout``: the same scenario, asserted in one and timed in
the other.

The scenario (``run``), on a portal at ``server`` whose rollout controller is stepped by ``Beat`` (the beat's
work, every second here):

1. ``devices`` agents, each its own process with its own state directory, enrol with one-time tokens into two
   groups and report idle.
2. A few agents are stopped (SIGSTOP) until the portal counts them offline.
3. Version 1 (good) rolls out to both groups: a canary of one, then 10, 50 and 100 percent. While it runs,
   agents caught mid-download are killed (SIGKILL) and started again (they resume from the bytes they kept),
   and the stopped agents come back once a wave past the canary has started (they catch up).
4. Version 2 (good) rolls out to the first group while version 3, whose health check fails, rolls out to the
   second: a canary of two, then 50 and 100 percent, with a failure threshold of three. The bad rollout pauses
   and rolls back; the devices it reached switch back to version 1 (the agent already did, locally).
5. Every agent's state directory is read: what it runs, whether those bytes hash to the version's SHA-256.

Artifacts are random bytes; the bad version starts with ``BAD_MARK``, which the health check refuses (as a
robot's smoke test would refuse a model that cannot load). Agents download at ``rate`` bytes/s so a download
lasts long enough to be killed in the middle of.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import close_old_connections, connection
from django.utils import timezone

from edge.actions import devices as edge_devices
from edge.actions import rollouts
from edge.models import Device, DeviceGroup, Rollout, RolloutState
from edge.presence import online_since
from registry import artifacts
from registry.models import Model, ModelVersion
from tenancy.models import Membership, Organization, Team
from tenancy.scoping import Role

AGENT = Path(__file__).resolve().parent.parent / "deploy" / "edge_agent.py"
BAD_MARK = b"BROKEN-MODEL\n"
HEALTH_CHECK = f"""import os, sys
with open(os.environ["QM_MODEL_PATH"], "rb") as model:
    sys.exit(1 if model.read({len(BAD_MARK)}) == {BAD_MARK!r} else 0)
"""
WAVES = [{"canary": 1}, {"percent": 10}, {"percent": 50}, {"percent": 100}]
POLL_WAIT = 5  # seconds an agent's long poll may be held
RESUMING = re.compile(r"resuming at (\d+) of (\d+) bytes")


class Agent:
    """One agent process: its state directory, its log (kept across restarts), signals."""

    def __init__(self, root: Path, name: str, group: str, server: str, token: str, options: list[str]) -> None:
        self.name, self.group = name, group
        self.folder = root / name
        self.log_path = root / f"{name}.log"
        self.argv = [sys.executable, str(AGENT), "--server", server, "--state-dir", str(self.folder)]
        self.argv += ["--enrol-token", token, "--name", name, *options]
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped = False
        self.kills = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - this repository's agent
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True
            )

    def signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, number)

    def kill(self) -> None:
        """SIGKILL the agent and whatever it runs (a health check): its process group, as a power cut would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(10)
        self.kills += 1

    def stop(self) -> None:
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.stopped = False

    def end(self) -> None:
        if self.process is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.process.wait(10)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def resumed_at(self) -> list[int]:
        """Where each resumed download started (bytes already held)."""
        return [int(m.group(1)) for m in RESUMING.finditer(self.log)]

    def state(self) -> dict[str, Any]:
        path = self.folder / "state.json"
        try:
            loaded: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return loaded

    def running_sha(self) -> str | None:
        running = self.state().get("running")
        return None if running is None else str(running["sha256"])

    def partial_bytes(self) -> int:
        folder = self.folder / "partial"
        return sum(p.stat().st_size for p in folder.glob("*.part")) if folder.exists() else 0

    def verified(self) -> tuple[str | None, bool]:
        """(the SHA-256 state.json says runs, whether the ``current`` file's bytes hash to it)."""
        sha = self.running_sha()
        current = self.folder / "current"
        if sha is None:
            return None, not current.exists()
        if not current.exists():
            return sha, False
        return sha, hashlib.sha256(current.read_bytes()).hexdigest() == sha


@dataclass
class Result:
    """What happened, for the test to assert and the benchmark to print."""

    devices: int = 0
    enrol_seconds: float = 0
    rollout_seconds: float = 0  # version 1 to every device, both groups, canary then waves
    bad_rollback_seconds: float = 0  # the bad version's rollout started -> every device back on version 1
    rollouts: dict[str, str] = field(default_factory=dict)  # name -> final state
    running: dict[str, str | None] = field(default_factory=dict)  # agent -> version label it runs
    unverified: list[str] = field(default_factory=list)  # agents whose current file does not match
    on_bad: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    resumed: dict[str, list[int]] = field(default_factory=dict)  # agent -> bytes it resumed from
    offline: list[str] = field(default_factory=list)
    phases_seen: dict[str, list[int]] = field(default_factory=dict)  # rollout -> phases it went through
    bad_reached: int = 0  # devices the bad rollout targeted before it stopped

    def figures(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "enrol_seconds": round(self.enrol_seconds, 1),
            "phased_rollout_seconds": round(self.rollout_seconds, 1),
            "bad_version_rollback_seconds": round(self.bad_rollback_seconds, 1),
            "devices_on_bad_version": len(self.on_bad),
            "devices_unverified": len(self.unverified),
            "bad_rollout_reached_devices": self.bad_reached,
            "killed_mid_download": len(self.killed),
            "resumed_downloads": sum(1 for starts in self.resumed.values() if any(starts)),
            "offline_during_rollout": len(self.offline),
            "rollouts": self.rollouts,
        }


class Beat(threading.Thread):
    """The rollout controller's beat (``rollouts.advance`` on every active rollout), every ``interval`` s."""

    def __init__(self, interval: float = 1.0) -> None:
        super().__init__(daemon=True, name="rollout-beat")
        self.interval = interval
        self.halt = threading.Event()
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            while not self.halt.wait(self.interval):
                close_old_connections()
                for pk in Rollout.objects.filter(state=RolloutState.RUNNING).values_list("pk", flat=True):
                    rollouts.advance(pk)
        except BaseException as error:  # noqa: BLE001 - kept for the caller to raise
            self.errors.append(error)
        finally:
            connection.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        if self.errors:
            raise self.errors[0]


def make_team(label: str) -> tuple[Team, User]:
    """An organization and team of their own, with a lead who runs the fleet."""
    organization = Organization.objects.create(name=f"Edge fleet {label}", slug=f"edge-{label}")
    team = Team.objects.create(organization=organization, name="Robots", slug="robots")
    lead = get_user_model().objects.create_user(f"fleet-lead-{label}")
    Membership.objects.create(user=lead, organization=organization, team=team, role=Role.LEAD)
    return team, lead


def publish(team: Team, lead: User, model: Model, version: str, data: bytes) -> ModelVersion:
    size, sha = artifacts.store(team.organization_id, io.BytesIO(data))
    return ModelVersion.objects.create(
        model=model,
        version=version,
        artifact_uri=f"store://{sha}",
        size_bytes=size,
        sha256=sha,
        stored=True,
        published_by=lead,
        published_at=timezone.now(),
    )


def wait_for(what: str, ready: Callable[[], bool], timeout: float, tick: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        if tick is not None:
            tick()
        time.sleep(0.2)


def state_of(rollout: Rollout) -> str:
    rollout.refresh_from_db()
    return str(rollout.state)


class Scenario:
    def __init__(
        self, server: str, root: Path, team: Team, lead: User, devices: int, size: int, rate: int, log: Any
    ) -> None:
        self.server, self.root, self.team, self.lead = server, root, team, lead
        self.devices, self.size, self.rate, self.say = devices, size, rate, log
        self.agents: list[Agent] = []
        self.result = Result(devices=devices)
        self.kill_budget = max(2, devices // 12)

    def agent_options(self) -> list[str]:
        health = self.root / "health_check.py"
        health.write_text(HEALTH_CHECK)
        return [
            "--health-command",
            f"{sys.executable} {health}",
            "--poll-wait",
            str(POLL_WAIT),
            "--backoff-max",
            "2",
            "--max-rate",
            str(self.rate),
        ]

    # the steps ---------------------------------------------------------------------------------------------
    def enrol(self) -> dict[str, DeviceGroup]:
        groups = {
            name: edge_devices.create_group(self.lead, self.team, name=name, kind=DeviceGroup.Kind.LAB)
            for name in ("lab-a", "lab-b")
        }
        options = self.agent_options()
        for i in range(self.devices):
            group = "lab-a" if i % 2 == 0 else "lab-b"
            _, token = edge_devices.issue_enrolment_token(self.lead, groups[group], hours=1)
            self.agents.append(Agent(self.root, f"robot-{i:02d}", group, self.server, token, options))
        started = time.monotonic()
        for agent in self.agents:
            agent.start()
        wait_for(
            f"{self.devices} devices to enrol and report idle",
            lambda: Device.objects.filter(team=self.team, last_status="idle").count() == self.devices,
            120,
        )
        self.result.enrol_seconds = time.monotonic() - started
        self.say(f"{self.devices} agents enrolled in {self.result.enrol_seconds:.1f} s")
        return groups

    def take_offline(self) -> list[Agent]:
        """Two agents of each group stopped until the portal no longer counts them online."""
        chosen = [a for a in self.agents if a.group == "lab-a"][-2:] + [a for a in self.agents if a.group == "lab-b"][
            -2:
        ]
        for agent in chosen:
            agent.stop()
        names = [a.name for a in chosen]
        wait_for(
            "the stopped agents to count as offline",
            lambda: (
                not Device.objects.filter(team=self.team, name__in=names, last_seen_at__gte=online_since()).exists()
            ),
            60,
        )
        self.result.offline = names
        self.say(f"offline: {', '.join(names)}")
        return chosen

    def kill_mid_download(self) -> None:
        """SIGKILL agents caught between 10% and 80% of a download, then start them again."""
        if len(self.result.killed) >= self.kill_budget:
            return
        for agent in self.agents:
            if agent.stopped or agent.kills or len(self.result.killed) >= self.kill_budget:
                continue
            held = agent.partial_bytes()
            if 0.1 * self.size < held < 0.8 * self.size:
                agent.kill()
                self.result.killed.append(agent.name)
                self.say(f"killed {agent.name} at {held} of {self.size} bytes; starting it again")
                agent.start()

    def roll_out_good(self, groups: dict[str, DeviceGroup], version: ModelVersion, offline: list[Agent]) -> None:
        started = time.monotonic()
        live = [
            rollouts.start_rollout(self.lead, group, version, phases=WAVES, offline_grace=8)
            for group in groups.values()
        ]
        seen: dict[int, set[int]] = {r.pk: set() for r in live}

        def tick() -> None:
            self.kill_mid_download()
            for rollout in live:
                rollout.refresh_from_db()
                seen[rollout.pk].add(rollout.current_phase)
            if offline and all(r.current_phase >= 1 for r in live):
                for agent in offline:
                    agent.resume()
                self.say(f"back online: {', '.join(a.name for a in offline)}")
                offline.clear()

        wait_for(
            "version 1 on every device",
            lambda: (
                all(state_of(r) == RolloutState.COMPLETED for r in live)
                and all(a.running_sha() == version.sha256 and a.state().get("health") == "healthy" for a in self.agents)
            ),
            300,
            tick,
        )
        self.result.rollout_seconds = time.monotonic() - started
        for rollout in live:
            self.result.rollouts[f"v1 to {rollout.group.name}"] = str(rollout.state)
            self.result.phases_seen[f"v1 to {rollout.group.name}"] = sorted(seen[rollout.pk])
        self.say(f"version 1 on all {self.devices} devices in {self.result.rollout_seconds:.1f} s")

    def roll_out_bad(
        self, groups: dict[str, DeviceGroup], good: ModelVersion, bad: ModelVersion, base: ModelVersion
    ) -> None:
        started = time.monotonic()
        fine = rollouts.start_rollout(self.lead, groups["lab-a"], good, phases=WAVES, offline_grace=8)
        broken = rollouts.start_rollout(
            self.lead,
            groups["lab-b"],
            bad,
            phases=[{"canary": 2}, {"percent": 50}, {"percent": 100}],
            failure_threshold=3,
            offline_grace=8,
        )
        group_b = [a for a in self.agents if a.group == "lab-b"]
        group_a = [a for a in self.agents if a.group == "lab-a"]
        wait_for(
            "the bad rollout to roll back and the good one to complete",
            lambda: (
                state_of(broken) == RolloutState.ROLLED_BACK
                and state_of(fine) == RolloutState.COMPLETED
                and all(a.running_sha() == base.sha256 and a.state().get("health") == "healthy" for a in group_b)
                and all(a.running_sha() == good.sha256 and a.state().get("health") == "healthy" for a in group_a)
            ),
            300,
        )
        self.result.bad_rollback_seconds = time.monotonic() - started
        self.result.rollouts["v2 to lab-a"] = str(fine.state)
        self.result.rollouts["v3 (bad) to lab-b"] = str(broken.state)
        self.result.bad_reached = broken.deployments.count()
        self.say(f"bad version rolled back in {self.result.bad_rollback_seconds:.1f} s")

    def inspect(self, versions: list[ModelVersion], bad: ModelVersion) -> None:
        names = {v.sha256: f"{v.model.name} {v.version}" for v in versions}
        for agent in self.agents:
            sha, intact = agent.verified()
            self.result.running[agent.name] = None if sha is None else names.get(sha, sha)
            if not intact:
                self.result.unverified.append(agent.name)
            if sha == bad.sha256:
                self.result.on_bad.append(agent.name)
            self.result.resumed[agent.name] = agent.resumed_at()
        on_bad_in_portal = Device.objects.filter(team=self.team, running_version=bad).values_list("name", flat=True)
        self.result.on_bad.extend(name for name in on_bad_in_portal if name not in self.result.on_bad)

    def run(self) -> Result:
        rng = random.Random(24)  # noqa: S311 - artifact bytes, not secrets
        model = Model.objects.create(team=self.team, name="detector", created_at=timezone.now(), created_by=self.lead)
        v1 = publish(self.team, self.lead, model, "1", rng.randbytes(self.size))
        v2 = publish(self.team, self.lead, model, "2", rng.randbytes(self.size))
        v3 = publish(self.team, self.lead, model, "3", BAD_MARK + rng.randbytes(self.size - len(BAD_MARK)))
        beat = Beat()
        beat.start()
        try:
            groups = self.enrol()
            offline = self.take_offline()
            self.roll_out_good(groups, v1, offline)
            self.roll_out_bad(groups, v2, v3, v1)
            self.inspect([v1, v2, v3], v3)
        finally:
            for agent in self.agents:
                agent.end()
            beat.stop()
            time.sleep(POLL_WAIT + 1)  # the portal's held polls of the ended agents run out before data goes
        return self.result


def run(
    server: str,
    root: Path,
    team: Team,
    lead: User,
    devices: int = 50,
    size: int = 4 << 20,
    rate: int = 2 << 20,
    log: Any = print,
) -> Result:
    """The scenario against the portal at ``server`` (whose database this process shares)."""
    root.mkdir(parents=True, exist_ok=True)
    return Scenario(server, root, team, lead, devices, size, rate, log).run()
