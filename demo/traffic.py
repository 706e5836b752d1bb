"""A small load on the demo's service, so that its page shows requests and latency over time and its
autoscaler moves: ``manage.py demo_devices`` runs it in a thread beside the device agents.

The rate follows a cycle of ``PERIOD`` seconds: ``QUIET`` requests per second, except from ``BUSY_FROM`` to
``BUSY_UNTIL`` seconds into each cycle, ``BUSY`` (with the service's target of 1.5 per replica: one replica
when quiet, three when busy; after the busy spell the scale-down window brings it back to one). Requests leave
at random (exponential gaps, open loop: a slow answer does not slow the sending) and go through the data
plane's endpoint, ``POST /serve/demo/robotics/grasp-policy/v1/predict``, as a user's would; at most ``WORKERS`` are in
flight, the rest are dropped and counted. Each minute a line sums up what was sent and answered.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

PERIOD = 900
BUSY_FROM, BUSY_UNTIL = 180, 480
QUIET, BUSY = 0.6, 4.0
WORKERS = 8
TIMEOUT = 30.0


def rate(second: float) -> float:
    """Requests per second ``second`` seconds after the load began."""
    return BUSY if BUSY_FROM <= second % PERIOD < BUSY_UNTIL else QUIET


@dataclass
class Tally:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    dropped: int = 0
    latencies: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> str:
        """This minute's summary, and a fresh count."""
        with self.lock:
            times = sorted(self.latencies)
            p50 = f"{1000 * times[len(times) // 2]:.0f} ms" if times else "-"
            line = f"{self.sent} sent, {self.ok} answered 2xx, {self.failed} failed, {self.dropped} dropped, p50 {p50}"
            self.sent = self.ok = self.failed = self.dropped = 0
            self.latencies = []
        return line


class Traffic:
    """Sends the load to ``url`` until ``stopping`` is set; ``log`` gets a line a minute."""

    def __init__(self, url: str, log: Callable[[str], None], rng: random.Random | None = None) -> None:
        self.url, self.log = url, log
        self.rng = rng or random.Random()  # noqa: S311 - a demo's timing, not a secret
        self.tally = Tally()
        self.inflight = threading.BoundedSemaphore(WORKERS)

    def run(self, stopping: threading.Event) -> None:
        began = last_line = time.monotonic()
        while not stopping.wait(self.rng.expovariate(rate(time.monotonic() - began))):
            if self.inflight.acquire(blocking=False):
                # A daemon thread per request: one still waiting for its answer never holds up the stop.
                threading.Thread(target=self._send, name="demo-traffic", daemon=True).start()
            else:
                with self.tally.lock:
                    self.tally.dropped += 1
            if time.monotonic() - last_line >= 60:
                last_line = time.monotonic()
                self.log(f"service load ({rate(last_line - began):g} rps now): {self.tally.take()}")

    def _send(self) -> None:
        body = json.dumps({"input": [self.rng.random() for _ in range(4)]}).encode()
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(self.url, data=body, method="POST", headers=headers)  # noqa: S310 - ours
        started = time.monotonic()
        ok = False
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:  # noqa: S310 - our own endpoint
                answer.read()
                ok = 200 <= answer.status < 300
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
            ok = False
        finally:
            self.inflight.release()
        with self.tally.lock:
            self.tally.sent += 1
            if ok:
                self.tally.ok += 1
                self.tally.latencies.append(time.monotonic() - started)
            else:
                self.tally.failed += 1
