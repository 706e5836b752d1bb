"""The cache of the embedded defaults (no Redis): Django's file-based cache, with ``add`` and ``incr`` made
atomic.

Django's own file cache reads and then writes in both, so two requests counting at once lose one of the counts,
and two callers of ``add`` may both be told they were first. On Redis both are single commands. The services'
load counters (``serving/load.py``: the data plane's counts, which the control loop reads and subtracts) and the
once-a-second guards and locks built on ``add`` need them atomic on the embedded defaults too, across the data
plane, the web server's threads and the worker's processes: here each key's ``add`` and ``incr`` run under an
exclusive ``flock`` on one of ``STRIPES`` lock files, chosen by the key.
"""

from __future__ import annotations

import fcntl
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.filebased import FileBasedCache

#: How many lock files the keys share (keys hashed onto them): a bounded set of files, and little contention.
STRIPES = 64


class FileCache(FileBasedCache):
    def __init__(self, location: str, params: dict[str, Any]) -> None:
        super().__init__(location, params)
        self.lock_dir = os.path.abspath(location)
        os.makedirs(self.lock_dir, exist_ok=True)  # once, not on every count

    @contextmanager
    def _locked(self, key: Any, version: int | None) -> Iterator[None]:
        stripe = zlib.crc32(self.make_and_validate_key(key, version).encode()) % STRIPES
        path = os.path.join(self.lock_dir, f"lock-{stripe}")
        with open(path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            yield

    def add(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        with self._locked(key, version):
            return super().add(key, value, timeout, version)

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> Any:
        with self._locked(key, version):
            return super().incr(key, delta, version)
