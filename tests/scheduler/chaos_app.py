"""The Celery app of the chaos tests' worker: the project's own, with the placement loop's hooks made to
pause a random moment (``QM_CHAOS_PAUSE`` seconds at most) so that kills land inside a cycle more often.

Run as a module, it is a fork server for such workers: ``python -m tests.scheduler.chaos_app LOG QUEUE``
imports Django, the project and its tasks once, then for each line ``start SEED`` read on stdin forks a
worker (logging to LOG, consuming QUEUE) and prints its pid. A worker then starts in a fraction of a second
instead of the interpreter's and Django's whole start-up, which is what lets a chaos run kill hundreds.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta

from portal.celery import app

__all__ = ["app"]

_pause = float(os.environ.get("QM_CHAOS_PAUSE", "0"))
if _pause:
    import django

    django.setup()
    from scheduler.placement import dispatch
    from scheduler.placement.loop import Hooks

    def _pausing(hook: str) -> Callable[[], None]:
        def wait() -> None:
            # Straight to the log (fd 2), which the test reads after each kill to tell where it landed.
            os.write(2, f"chaos: at {hook}\n".encode())
            time.sleep(random.uniform(0, _pause))

        return wait

    Hooks.before_apply = _pausing("before_apply")
    Hooks.before_commit = _pausing("before_commit")
    Hooks.after_commit = _pausing("after_commit")
    # A killed dispatcher's claim runs out quickly, as a killed leader's lock does (PLACEMENT_LOCK_SECONDS):
    # otherwise the run's last kills would leave their attempts to wait out the production claim of minutes.
    dispatch.DISPATCH_CLAIM = timedelta(seconds=5)


def _worker(log: str, queue: str, seed: int) -> None:
    """In the forked child: become a Celery worker, as ``celery -A tests.scheduler.chaos_app worker`` would."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    random.seed(seed)  # each worker its own pauses (the fork server's state would repeat in every child)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    app.worker_main(
        [
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "INFO",
        ]
    )


def serve(log: str, queue: str) -> None:
    import django
    from django.core.checks import run_checks
    from django.db import connections

    django.setup()
    app.loader.import_default_modules()  # the tasks, imported once for every worker to come
    run_checks()  # Django's system checks, which each worker would run again at its start: once here
    os.environ["CELERY_SKIP_CHECKS"] = "1"
    connections.close_all()  # no connection may be shared with the children
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the killed workers
    for line in sys.stdin:
        command, *args = line.split()
        if command != "start":
            continue
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                _worker(log, queue, int(args[0]))
            except SystemExit as end:
                status = end.code if isinstance(end.code, int) else 0
            except BaseException:  # noqa: BLE001 - anything at all: the child must never return into the loop
                traceback.print_exc()
                status = 1
            finally:
                os._exit(status)
        print(pid, flush=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
