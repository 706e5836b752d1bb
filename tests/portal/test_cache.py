"""The embedded defaults' cache (``portal/cache.py``): ``incr`` and ``add`` are atomic across threads and
processes, as on Redis, so the router's in-flight counters neither drift nor lose counts."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings

from portal.cache import FileCache


@pytest.fixture
def cache(tmp_path: Path) -> FileCache:
    return FileCache(str(tmp_path), {"OPTIONS": {"MAX_ENTRIES": 20000}})


def together(work: Callable[[], object], threads: int = 8) -> None:
    start = threading.Barrier(threads)

    def run() -> None:
        start.wait()
        work()

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()


def test_concurrent_increments_and_decrements_leave_the_count_exact(cache: FileCache) -> None:
    cache.set("inflight", 0, None)
    cache.set("requests", 0, None)

    def requests() -> None:
        for _ in range(150):
            cache.incr("inflight")
            cache.incr("requests")
            cache.decr("inflight")

    together(requests)
    assert (cache.get("inflight"), cache.get("requests")) == (0, 8 * 150)


def test_only_one_of_many_concurrent_adds_is_first(cache: FileCache) -> None:
    firsts: list[bool] = []
    together(lambda: firsts.append(cache.add("woken", 1, timeout=60)), threads=16)
    assert firsts.count(True) == 1
    assert len(firsts) == 16


def test_other_processes_counting_at_once_lose_nothing(cache: FileCache, tmp_path: Path) -> None:
    cache.set("requests", 0, None)
    program = (
        "import sys; sys.path.insert(0, sys.argv[2])\n"
        "from portal.cache import FileCache\n"
        "cache = FileCache(sys.argv[1], {})\n"
        "for _ in range(300): cache.incr('requests')\n"
    )
    root = str(Path(settings.BASE_DIR))
    workers = [subprocess.Popen([sys.executable, "-c", program, str(tmp_path), root]) for _ in range(2)]
    for _ in range(300):
        cache.incr("requests")
    assert [worker.wait(120) for worker in workers] == [0, 0]
    assert cache.get("requests") == 900


def test_a_missing_key_is_still_an_error_to_increment(cache: FileCache) -> None:
    with pytest.raises(ValueError, match="not found"):
        cache.incr("never-set")
