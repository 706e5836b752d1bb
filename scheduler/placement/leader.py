"""One placement loop at a time: a lock in Redis, or a file lock on the embedded defaults (one machine).

The lock only keeps two loops from doing the same work twice. Safety does not rest on it: a loop applies
its decisions only if no other loop applied since it read the fleet (``LoopState.generation``), so a
leader that stalls past its lock's expiry, or a Redis that restarts and forgets the lock, can waste a
cycle but never double-book capacity.
"""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)


class Lease:
    """What ``leadership`` yields: whether this process leads, and a way to renew the lease between cycles."""

    def __init__(self, held: bool, lock: Any = None) -> None:
        self.held = held
        self._lock = lock

    def __bool__(self) -> bool:
        return self.held

    def renew(self) -> bool:
        """Restart the lock's expiry; False if it was lost meanwhile (then stop leading)."""
        if self._lock is None or not self.held:
            return self.held
        from redis.exceptions import LockError, RedisError

        try:
            self._lock.reacquire()
        except (LockError, RedisError) as error:
            log.warning("placement loop lost its lock: %s", error)
            self.held = False
        return self.held


@contextmanager
def leadership(name: str) -> Iterator[Lease]:
    """Yields a true ``Lease`` while this process holds the ``name`` lock, a false one when another process
    does (or Redis is down: then nobody leads until it is back, and the cycle is skipped rather than run
    unguarded). A leader that dies holds the lock ``PLACEMENT_LOCK_SECONDS`` at most."""
    if settings.REDIS_URL:
        with _redis_lock(settings.REDIS_URL, name, settings.PLACEMENT_LOCK_SECONDS) as lease:
            yield lease
    else:
        with _file_lock(name) as held:
            yield Lease(held)


@contextmanager
def _redis_lock(url: str, name: str, ttl: float) -> Iterator[Lease]:
    import redis
    from redis.exceptions import LockError, RedisError

    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    # redis-py's lock: SET NX PX with a random token; release and extend check the token in a Lua script.
    lock = client.lock(f"{settings.REDIS_KEY_PREFIX}:leader:{name}", timeout=ttl, blocking=False)
    try:
        held = bool(lock.acquire(blocking=False))
    except RedisError as error:
        log.warning("placement loop skipped: Redis lock unavailable (%s)", error)
        held = False
    lease = Lease(held, lock)
    try:
        yield lease
    finally:
        if lease.held:
            try:
                lock.release()
            except (LockError, RedisError) as error:  # expired and taken over, or Redis went away
                log.warning("placement loop lock not released cleanly: %s", error)
        client.close()


@contextmanager
def _file_lock(name: str) -> Iterator[bool]:
    path = settings.VAR_DIR / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
