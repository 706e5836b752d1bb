"""The embedded broker (portal/broker.py): many processes on one folder, every message delivered exactly once.

The same scenarios fail on kombu's own filesystem transport (unreadable half-written messages, a message
lost with the consumer that held it, bindings lost); to see it:

    python -m tests.portal.test_broker kombu.transport.filesystem:Transport
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from queue import Empty
from typing import Any

import kombu
import pytest

OURS = "portal.broker:Transport"
PUBLISHERS, CONSUMERS, MESSAGES = 4, 4, 250
# Forked, not spawned: the children start in milliseconds, so they really do run at the same time.
fork = multiprocessing.get_context("fork")


def connect(transport: str, folder: Path) -> kombu.Connection:
    options = {
        "data_folder": str(folder),
        # kombu's own transport names its folders so; the parameter is there to compare the two.
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(folder / "control"),
        "polling_interval": 0.005,
        "recovery_interval": 0.2,
    }
    (folder / "control").mkdir(exist_ok=True)
    return kombu.Connection("filesystem://", transport=transport, transport_options=options)


def publish(transport: str, folder: Path, publisher: int) -> None:
    with connect(transport, folder) as connection:
        queue = connection.SimpleQueue("stress")
        for n in range(MESSAGES):
            queue.put({"publisher": publisher, "n": n})


def consume(transport: str, folder: Path, out: Path, done: Any) -> None:
    """Take messages until the publishers are done and the queue stays empty; write what came, and errors."""
    got: list[list[int]] = []
    errors: list[str] = []
    with connect(transport, folder) as connection:
        queue = connection.SimpleQueue("stress")
        quiet = 0
        while quiet < 20:
            try:
                message = queue.get(timeout=0.05)
            except Empty:
                quiet = quiet + 1 if done.is_set() else 0
                continue
            except (ValueError, OSError, kombu.exceptions.KombuError) as exc:  # what kombu's transport raises
                errors.append(repr(exc))
                continue
            got.append([message.payload["publisher"], message.payload["n"]])
            message.ack()
    out.write_text(json.dumps({"got": got, "errors": errors}))


def run_stress(transport: str, folder: Path) -> dict[str, Any]:
    """Publishers and consumers at once on one folder: what was delivered, how often, and the errors."""
    done = fork.Event()
    consumers = [
        fork.Process(target=consume, args=(transport, folder, folder / f"consumer-{i}.json", done))
        for i in range(CONSUMERS)
    ]
    publishers = [fork.Process(target=publish, args=(transport, folder, i)) for i in range(PUBLISHERS)]
    for process in consumers + publishers:
        process.start()
    for process in publishers:
        process.join(120)
    done.set()
    for process in consumers:
        process.join(120)
    results = [json.loads((folder / f"consumer-{i}.json").read_text()) for i in range(CONSUMERS)]
    delivered = sorted(tuple(pair) for result in results for pair in result["got"])
    return {
        "delivered": len(delivered),
        "distinct": len(set(delivered)),
        "missing": PUBLISHERS * MESSAGES - len(set(delivered)),
        "errors": [error for result in results for error in result["errors"]],
        "per_consumer": [len(result["got"]) for result in results],
    }


def test_many_publishers_and_consumers_deliver_every_message_once(tmp_path: Path) -> None:
    result = run_stress(OURS, tmp_path)
    assert result["errors"] == []
    assert (result["delivered"], result["distinct"]) == (PUBLISHERS * MESSAGES, PUBLISHERS * MESSAGES), result
    assert all(result["per_consumer"]), result  # every consumer took part: the claims really raced
    assert not [name for name in os.listdir(tmp_path) if name.endswith((".msg", ".claimed", ".tmp"))]


def take_and_die(transport: str, folder: Path, taken: Any) -> None:
    """Take one message without acknowledging it, say so, and wait to be killed (a worker killed mid-task)."""
    with connect(transport, folder) as connection:
        message = connection.SimpleQueue("stress").get(timeout=10)
        taken.put(message.payload)
        time.sleep(60)


def run_killed_consumer(transport: str, folder: Path) -> dict[str, Any]:
    """A consumer takes a message and is SIGKILLed before acknowledging it: does another consumer get it?"""
    with connect(transport, folder) as connection:
        connection.SimpleQueue("stress").put({"task": "survives"})
    taken = fork.Queue()
    victim = fork.Process(target=take_and_die, args=(transport, folder, taken))
    victim.start()
    first = taken.get(timeout=10)
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    victim.join()
    with connect(transport, folder) as connection:
        try:
            message = connection.SimpleQueue("stress").get(timeout=5)
        except Empty:
            return {"first": first, "again": None}
        message.ack()
        return {"first": first, "again": message.payload, "redelivered": message.delivery_info.get("redelivered")}


def test_a_message_held_by_a_killed_consumer_is_delivered_again(tmp_path: Path) -> None:
    result = run_killed_consumer(OURS, tmp_path)
    assert result == {"first": {"task": "survives"}, "again": {"task": "survives"}, "redelivered": True}
    with connect(OURS, tmp_path) as connection, pytest.raises(Empty):
        connection.SimpleQueue("stress").get(timeout=0.5)  # once acknowledged, it is gone


def test_an_unreadable_file_is_set_aside_and_the_next_message_delivered(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000001_0.stress.msg").write_bytes(b"")  # a disk that lost power mid-write
    with connect(OURS, tmp_path) as connection:
        queue = connection.SimpleQueue("stress")
        queue.put({"n": 2})
        message = queue.get(timeout=5)
        message.ack()
    assert message.payload == {"n": 2}
    assert os.listdir(tmp_path / "control")
    assert sorted(name for name in os.listdir(tmp_path) if name != "control") == [
        "00000000000000000001_0.stress.msg.unreadable"
    ]


def test_a_requeued_message_comes_back_once(tmp_path: Path) -> None:
    with connect(OURS, tmp_path) as connection:
        queue = connection.SimpleQueue("stress")
        queue.put({"n": 1})
        queue.get(timeout=5).requeue()
        again = queue.get(timeout=5)
        again.ack()
        with pytest.raises(Empty):
            queue.get(timeout=0.3)
    assert again.payload == {"n": 1}


EXCHANGES = 30


def bind(transport: str, folder: Path, binder: int, start: Any) -> None:
    """Bind a queue of this binder to each exchange; the binders start together, so they race to create
    each exchange's table."""
    with connect(transport, folder) as connection:
        channel: Any = connection.default_channel
        start.wait()
        for e in range(EXCHANGES):
            exchange = kombu.Exchange(f"fanout-{e}", type="fanout")
            kombu.Queue(f"q-{binder}-{e}", exchange).bind(channel).declare()


def read_tables(transport: str, folder: Path, out: Path, done: Any) -> None:
    errors, reads = [], 0
    with connect(transport, folder) as connection:
        channel: Any = connection.default_channel
        while not done.is_set():
            for e in range(EXCHANGES):
                try:
                    channel.get_table(f"fanout-{e}")
                    reads += 1
                except (ValueError, OSError, kombu.exceptions.KombuError) as exc:  # what kombu's transport raises
                    errors.append(repr(exc))
    out.write_text(json.dumps({"errors": errors, "reads": reads}))


def run_bindings(transport: str, folder: Path) -> dict[str, Any]:
    """Processes bind queues to the same fanout exchanges at once while another reads their tables."""
    done, start = fork.Event(), fork.Barrier(PUBLISHERS)
    reader = fork.Process(target=read_tables, args=(transport, folder, folder / "reader.json", done))
    reader.start()
    binders = [fork.Process(target=bind, args=(transport, folder, i, start)) for i in range(PUBLISHERS)]
    for process in binders:
        process.start()
    for process in binders:
        process.join(60)
    done.set()
    reader.join(60)
    with connect(transport, folder) as connection:
        channel: Any = connection.default_channel
        bound = sum(len(channel.get_table(f"fanout-{e}")) for e in range(EXCHANGES))
    return {"bound": bound, "expected": PUBLISHERS * EXCHANGES, **json.loads((folder / "reader.json").read_text())}


def test_concurrent_bindings_are_all_kept_and_tables_always_readable(tmp_path: Path) -> None:
    result = run_bindings(OURS, tmp_path)
    assert (result["bound"], result["errors"]) == (result["expected"], []), result
    assert result["reads"] > 0


@pytest.mark.parametrize(
    ("env", "transport"),
    [
        ({}, "portal.broker.Transport"),
        ({"REDIS_URL": "redis://127.0.0.1:6379/9"}, "kombu.transport.redis.Transport"),
        ({"CELERY_BROKER_URL": "memory://"}, "kombu.transport.memory.Transport"),
    ],
)
def test_every_process_takes_the_embedded_broker_unless_another_is_configured(
    tmp_path: Path, env: dict[str, str], transport: str
) -> None:
    from tests.portal.test_settings_env import manage

    script = (
        "from portal.celery import app; t = type(app.connection_for_write().transport); print(t.__module__, t.__name__)"
    )
    result = manage("shell", "--no-imports", "-c", script, QM_VAR_DIR=str(tmp_path), **env)
    assert result.returncode == 0, result.stderr
    assert ".".join(result.stdout.split()) == transport


if __name__ == "__main__":
    import tempfile

    transport = sys.argv[1] if len(sys.argv) > 1 else OURS
    for scenario in (run_stress, run_killed_consumer, run_bindings):
        with tempfile.TemporaryDirectory() as folder:
            outcome = scenario(transport, Path(folder))
            if "errors" in outcome:
                outcome["errors"] = [*sorted(set(outcome["errors"]))[:3], f"({len(outcome['errors'])} in all)"]
            print(scenario.__name__, json.dumps(outcome))
