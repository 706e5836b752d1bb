"""The Celery app of the chaos tests' worker: the project's own, with the placement loop's hooks made to
pause a random moment (``QM_CHAOS_PAUSE`` seconds at most) so that kills land inside a cycle more often."""

from __future__ import annotations

import os
import random
import time

from portal.celery import app

__all__ = ["app"]

_pause = float(os.environ.get("QM_CHAOS_PAUSE", "0"))
if _pause:
    import django

    django.setup()
    from scheduler.loop import Hooks

    def _wait() -> None:
        time.sleep(random.uniform(0, _pause))

    Hooks.before_apply = Hooks.before_commit = Hooks.after_commit = _wait
