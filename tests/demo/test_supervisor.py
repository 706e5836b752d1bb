"""The demo's supervisor: a child that exits is restarted alone, with a growing pause, and stop stops all."""

from __future__ import annotations

import re
import struct
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from demo.supervisor import Supervisor, metrics_directory

PY = sys.executable
STEADY = [PY, "-c", "import time; time.sleep(120)"]
CRASHING = [PY, "-c", "import sys; sys.exit(3)"]


@contextmanager
def supervising(commands: dict[str, list[str]], **options: Any) -> Iterator[tuple[Supervisor, list[str]]]:
    """A supervisor running in a thread (the demo runs it in its main thread), stopped on leaving."""
    log: list[str] = []
    supervisor = Supervisor(commands, log.append, **options)
    stopping = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stopping, 0.02))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while any(child.process is None for child in supervisor.children):  # all started once
            assert time.monotonic() < deadline, log
            time.sleep(0.01)
        yield supervisor, log
    finally:
        stopping.set()
        thread.join(30)
        assert not thread.is_alive()


def pauses(log: list[str], name: str) -> list[float]:
    return [
        float(p)
        for p in re.findall(rf"^{name} \(pid \d+\) exited with .*; restart \d+ in ([\d.]+) s$", "\n".join(log), re.M)
    ]


def test_a_crashing_child_is_restarted_with_growing_pauses_and_the_others_stay_up() -> None:
    with supervising({"steady": STEADY, "crashing": CRASHING}, first_backoff=0.1, max_backoff=0.4) as (sup, log):
        steady = sup.children[0]
        first_pid = steady.process.pid if steady.process else None
        time.sleep(2.5)
        assert steady.process is not None
        assert (steady.process.pid, steady.process.poll(), steady.restarts) == (first_pid, None, 0)
        crashing = sup.children[1]
    # 0.1 + 0.2 + 0.4 + 0.4 ... plus the start of Python each time: a handful of restarts, not hundreds.
    assert pauses(log, "crashing")[:4] == [0.1, 0.2, 0.4, 0.4]
    assert 4 <= crashing.restarts <= 10, log
    assert any(line.startswith("crashing (pid") and "exited with status 3" in line for line in log)
    assert not [line for line in log if line.startswith("steady") and "exited" in line]
    # Stopped with the supervisor.
    assert steady.process is None


def test_a_child_that_ran_long_enough_gets_the_first_pause_again() -> None:
    short_lived = [PY, "-c", "import time; time.sleep(0.4)"]
    with supervising({"short": short_lived}, first_backoff=0.1, max_backoff=5, stable_after=0.3) as (_, log):
        time.sleep(2.5)
    assert len(pauses(log, "short")) >= 2
    assert set(pauses(log, "short")) == {0.1}


def test_a_killed_child_is_named_with_its_signal_and_started_again() -> None:
    with supervising({"victim": STEADY}, first_backoff=0.1) as (sup, log):
        deadline = time.monotonic() + 10
        victim: Any = sup.children[0].process
        victim.kill()
        while sup.children[0].restarts == 0 or sup.children[0].process is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        again: Any = sup.children[0].process
        assert (again.pid != victim.pid, again.poll()) == (True, None)
    assert f"victim (pid {victim.pid}) exited with signal SIGKILL" in "\n".join(log)


def test_stop_kills_a_child_that_ignores_sigterm_after_the_timeout() -> None:
    stubborn = [
        PY,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)",
    ]
    log: list[str] = []
    supervisor = Supervisor({"stubborn": stubborn, "steady": STEADY}, log.append, stop_timeout=1)
    stopping = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stopping, 0.02))
    thread.start()
    time.sleep(1)  # both started, SIGTERM ignored from here on
    processes = [child.process for child in supervisor.children]
    began = time.monotonic()
    stopping.set()
    thread.join(10)
    assert time.monotonic() - began < 3
    assert [p.returncode for p in processes if p] == [-9, -15]


def test_the_children_write_their_metrics_into_one_directory_emptied_first(tmp_path: Any) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "counter_999.db").write_bytes(b"an earlier run's counts")
    env = metrics_directory(metrics)
    assert list(metrics.iterdir()) == []
    count = (
        "from prometheus_client import Counter; Counter('qm_test_total', 'a test').inc(); import time; time.sleep(120)"
    )
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    def counted() -> float | None:
        """Both children's counts, once both have written them (a file just made is empty for a moment)."""
        if len(list(metrics.glob("counter_*.db"))) < 2:
            return None
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(metrics))
        try:
            return registry.get_sample_value("qm_test_total")
        except struct.error:
            return None

    with supervising({"one": [PY, "-c", count], "two": [PY, "-c", count]}, env=env):
        deadline = time.monotonic() + 30
        while (total := counted()) != 2:
            assert time.monotonic() < deadline, (total, list(metrics.iterdir()))
            time.sleep(0.05)
    assert counted() == 2  # and kept once they stopped
