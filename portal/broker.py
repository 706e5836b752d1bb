"""The embedded Celery broker: messages as files in one folder, safe for many publishers and consumers.

The web server, the worker and beat use it whenever no Redis is configured (``CELERY_BROKER_TRANSPORT`` in
settings). It is kombu's filesystem transport (``kombu/transport/filesystem.py``, kombu 5.7) with its races
closed; each was seen to stop the demo's worker or lose its tasks:

- **Half-written messages.** kombu creates a message file under its final, consumable name, then locks and
  writes it (the lock is advisory and the reader never takes it). A consumer polling the folder in between
  reads an empty or partial file, ``json.loads`` raises ``JSONDecodeError`` and a Celery worker stops for
  good. Here a message is written under a temporary name the consumers ignore, flushed to disk, and renamed
  into place: a consumer sees a whole message or none.
- **Two consumers, one message.** kombu claims a file with ``shutil.move`` into the system's temporary
  folder, under the same name for every consumer; where that folder is another file system (``/tmp`` on
  tmpfs) the move is a copy and a delete, and a consumer can read the copy while a second one is writing
  it over. Here a consumer locks the file and renames it to a claimed name in the same folder: one rename
  succeeds, every other consumer moves on.
- **Lost on a killed worker.** kombu deletes a message as it reads it, before the task runs, so a worker
  killed mid-task loses it (despite ``acks_late``). Here the claimed file stays, locked by its consumer,
  until the message is acknowledged; a claim whose lock is free (its consumer died) is put back in its
  queue by the next consumer that looks (every ``recovery_interval`` seconds).
- **Binding tables.** kombu rewrites an exchange's table of bound queues in place, truncating it when it
  opens the file, before taking the lock: a publisher reading it meanwhile sees an empty table, and two
  processes binding at once can lose one's binding. Here a table is changed under a lock file and
  replaced by rename, and readers need no lock.

Message names never repeat: ``<time in ns>_<uuid>.<queue>.msg`` (kombu's shape, so ``_size`` and
``_purge`` stay kombu's); claimed ones end in ``.claimed``; a file that cannot be parsed (a disk that lost
power mid-write) is renamed ``.unreadable`` and logged, never raised into the worker.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import IO, Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem, virtual
from kombu.utils.json import dumps, loads

logger = logging.getLogger(__name__)

MESSAGE = ".msg"
CLAIMED = ".claimed"
UNREADABLE = ".unreadable"
TEMPORARY = ".tmp"


@dataclass
class Claim:
    """A message a consumer took: its file (renamed, locked by the open handle) and its content."""

    path: Path
    file: IO[bytes]
    payload: dict[str, Any]


#: Claim files open in this process. A process forked from a consumer (a Celery pool child) inherits their
#: handles and with them the locks, which would make a claim look alive after its consumer died; the child
#: closes its copies at once, which leaves the parent's locks as they are.
_open_claims: set[IO[bytes]] = set()


def _forget_claims_in_child() -> None:
    for file in _open_claims:
        file.close()
    _open_claims.clear()


os.register_at_fork(after_in_child=_forget_claims_in_child)


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees the file partly written."""
    temporary = path.with_name(f".{uuid.uuid4().hex}{TEMPORARY}")
    try:
        with temporary.open("xb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        temporary.rename(path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ChannelError(f"Cannot write {path}") from exc


def _queue_of(name: str) -> str | None:
    """The queue of a ready message's file name, or None for anything else in the folder."""
    stem, dot, rest = name.partition(".")
    if not dot or not stem[:1].isdigit() or not rest.endswith(MESSAGE):
        return None
    return rest.removesuffix(MESSAGE)


def _lock(file: IO[bytes]) -> bool:
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _still_at(path: Path, file: IO[bytes]) -> bool:
    """Whether ``path`` is still the file opened as ``file`` (not taken away while we waited for its lock)."""
    try:
        return path.stat().st_ino == os.fstat(file.fileno()).st_ino
    except FileNotFoundError:
        return False


class QoS(virtual.QoS):
    """kombu's bookkeeping of unacknowledged messages, with the claim files kept in step with it."""

    channel: Channel

    def ack(self, delivery_tag: str) -> None:
        self.channel.settle(delivery_tag)
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        # Not super(): kombu would publish a second copy and leave the claim to be recovered as a third.
        if requeue:
            self.channel.release(delivery_tag)
        else:
            self.channel.settle(delivery_tag)
        super().ack(delivery_tag)

    # kombu's stubs say None; kombu's restore_unacked_once reads the errors.
    def restore_unacked(self) -> list[tuple[BaseException, Any]]:  # type: ignore[override]
        """Put every unacknowledged message back in its queue (at shutdown, or on ``basic_recover``)."""
        assert self._delivered is not None
        assert self._dirty is not None
        while self._dirty:  # what was acknowledged meanwhile
            self._delivered.pop(self._dirty.pop(), None)
        errors: list[tuple[BaseException, Any]] = []
        while self._delivered:
            tag, message = self._delivered.popitem()
            try:
                self.channel.release(tag)
            except Exception as exc:  # noqa: BLE001 - kombu reports what could not be restored
                errors.append((exc, message))
        return errors


class Channel(filesystem.Channel):
    """A connection's channel to the message folder; see the module's docstring for what differs."""

    QoS = QoS

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._claims: dict[str, Claim] = {}
        self._no_ack_queues: set[str] = set()
        self._next_recovery = 0.0
        self.folder.mkdir(parents=True, exist_ok=True)
        self.control_folder.mkdir(parents=True, exist_ok=True)

    @property
    def folder(self) -> Path:
        return Path(self.transport_options["data_folder"])

    # kombu's own methods (_size, _purge) read the folder under these names.
    @property
    def data_folder_in(self) -> str:
        return str(self.folder)

    @property
    def data_folder_out(self) -> str:
        return str(self.folder)

    @property
    def recovery_interval(self) -> float:
        return float(self.transport_options.get("recovery_interval", 2.0))

    # --- messages ---------------------------------------------------------------------------------------
    # (kombu's stubs disagree between its virtual and filesystem channels; these follow filesystem's.)
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        self._publish(queue, payload, f"{time.time_ns():020d}")

    def _publish(self, queue: str, payload: dict[str, Any], timestamp: str) -> None:
        name = f"{timestamp}_{uuid.uuid4().hex}.{queue}{MESSAGE}"
        write_atomically(self.folder / name, dumps(payload).encode())

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        if time.monotonic() >= self._next_recovery:
            self._next_recovery = time.monotonic() + self.recovery_interval
            self.recover_abandoned()
        for name in sorted(os.listdir(self.folder)):
            if _queue_of(name) != queue:
                continue
            claim = self._claim(self.folder / name)
            if claim is None:
                continue
            tag = claim.payload.get("properties", {}).get("delivery_tag")
            if queue in self._no_ack_queues or not isinstance(tag, str):
                self._drop(claim)  # nobody will acknowledge it
            else:
                self._claims[tag] = claim
            return claim.payload
        raise Empty()

    def _claim(self, path: Path) -> Claim | None:
        """Take the message at ``path`` for this consumer, or None if another consumer has it."""
        try:
            file = path.open("rb")
        except FileNotFoundError:
            return None
        claimed = path.with_name(path.name + CLAIMED)
        try:
            if not _lock(file):
                file.close()
                return None
            path.rename(claimed)  # fails when another consumer claimed it while we waited for the lock
        except FileNotFoundError:
            file.close()
            return None
        payload = self._read(claimed, file)
        if payload is None:
            return None
        _open_claims.add(file)
        return Claim(claimed, file, payload)

    def _read(self, path: Path, file: IO[bytes]) -> dict[str, Any] | None:
        """The message in ``file``; a file that is not one is set aside (and closed), never raised."""
        try:
            payload = loads(file.read())
            if isinstance(payload, dict):
                return payload
            raise ValueError("not a message")
        except ValueError as exc:
            aside = path.with_name(path.name.removesuffix(CLAIMED) + UNREADABLE)
            logger.error("Broker message %s cannot be read (%s); kept as %s", path.name, exc, aside.name)
            path.rename(aside)
            file.close()
            return None

    def settle(self, delivery_tag: str) -> None:
        """The message was handled (or is refused for good): its claim is removed."""
        claim = self._claims.pop(delivery_tag, None)
        if claim is not None:
            self._drop(claim)

    def release(self, delivery_tag: str) -> None:
        """The message goes back to its queue, in its place, marked as redelivered."""
        claim = self._claims.pop(delivery_tag, None)
        if claim is not None:
            self._put_back(claim)

    def _drop(self, claim: Claim) -> None:
        claim.path.unlink(missing_ok=True)
        self._close(claim.file)

    def _put_back(self, claim: Claim) -> None:
        # A new file (a new name with the old timestamp), written before the claim is removed: a crash in
        # between delivers the message twice rather than never. The old name is never used again, so a
        # consumer that opened it before it was claimed can never take the copy by mistake.
        timestamp = claim.path.name.partition("_")[0]
        queue = _queue_of(claim.path.name.removesuffix(CLAIMED))
        payload = claim.payload
        payload.setdefault("properties", {}).setdefault("delivery_info", {})["redelivered"] = True
        if queue is not None:
            self._publish(queue, payload, timestamp)
        self._drop(claim)

    def _close(self, file: IO[bytes]) -> None:
        _open_claims.discard(file)
        file.close()

    def recover_abandoned(self) -> int:
        """Put back every claimed message whose consumer is gone (its lock is free); returns how many."""
        recovered = 0
        for name in os.listdir(self.folder):
            path = self.folder / name
            if name.endswith(TEMPORARY):
                self._remove_stale_temporary(path)
            if not name.endswith(CLAIMED):
                continue
            try:
                file = path.open("rb")
            except FileNotFoundError:
                continue
            if not _lock(file) or not _still_at(path, file):
                file.close()
                continue
            payload = self._read(path, file)
            if payload is None:
                continue
            logger.warning("Broker message %s was claimed by a consumer that is gone; it is queued again", name)
            self._put_back(Claim(path, file, payload))
            recovered += 1
        return recovered

    @staticmethod
    def _remove_stale_temporary(path: Path) -> None:
        """A publisher that died mid-write leaves its temporary file; an hour later it is surely dead."""
        try:
            if time.time() - path.stat().st_mtime > 3600:
                path.unlink()
        except FileNotFoundError:
            pass

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        # Consumers that acknowledge nothing (Celery's remote control, replies) get their messages removed
        # when they are read, as in kombu.
        if no_ack:
            self._no_ack_queues.add(queue)
        else:
            self._no_ack_queues.discard(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack, **kwargs)
        if message is not None and no_ack and message.delivery_tag:
            self.settle(message.delivery_tag)
        return message

    # --- exchange tables --------------------------------------------------------------------------------
    def get_table(self, exchange: str) -> list[filesystem.exchange_queue_t]:  # type: ignore[override]
        file = self._table_file(exchange)
        try:
            rows = loads(file.read_bytes())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise ChannelError(f"Cannot read {file}") from exc
        return [filesystem.exchange_queue_t(*row) for row in rows]

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str | None, queue: str) -> None:
        row = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._change_table(exchange, lambda rows: rows if row in rows else [row, *rows])

    def _delete(self, queue: str, exchange: str, routing_key: str, pattern: str | None, *args: Any, **kw: Any) -> None:
        self._purge(queue)
        row = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._change_table(exchange, lambda rows: [r for r in rows if r != row])

    def _change_table(
        self,
        exchange: str,
        change: Callable[[list[filesystem.exchange_queue_t]], list[filesystem.exchange_queue_t]],
    ) -> None:
        file = self._table_file(exchange)
        with file.with_name(file.name + ".lock").open("ab") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the lock file is closed
            rows = self.get_table(exchange)
            changed = change(rows)
            if changed != rows:
                write_atomically(file, dumps(changed).encode())

    def _table_file(self, exchange: str) -> Path:
        # kombu's checks that the exchange's name makes a file name in the control folder and nothing else.
        file: Path = self._exchange_file(exchange)  # type: ignore[attr-defined]
        return file


class Transport(filesystem.Transport):
    """The embedded broker's transport: ``CELERY_BROKER_TRANSPORT = "portal.broker:Transport"``.

    Options (``CELERY_BROKER_TRANSPORT_OPTIONS``): ``data_folder`` (the messages), ``control_folder`` (the
    exchanges' tables), ``polling_interval`` and ``recovery_interval`` (seconds).
    """

    Channel = Channel
    driver_type = "filesystem"
    driver_name = "quartermaster-filesystem"

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        # Declared exchanges and bindings per connection, as in kombu's other transports, not per process as
        # in its filesystem one: a process holding a binding in memory would never write it to the table of
        # another folder (a second connection with other options, as the tests make).
        self.state = virtual.BrokerState()
