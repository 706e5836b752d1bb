"""Queueing a Celery task by its name: how actions and loops ask for work without importing the tasks modules.

A tasks module imports the logic it runs; the logic that asks for a task names it (``"scheduler.tasks.dispatch_
attempts"``) instead of importing it back, so no logic module depends on a tasks module and the two never form an
import cycle (docs/architecture.md, "Layers"). A name that no task has raises ``ModuleNotFoundError`` or
``NotRegistered`` at once, in tests too: a typo is a failure, never a silent loss.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from celery import current_app

log = logging.getLogger(__name__)


def send(task_name: str, *args: Any) -> bool:
    """Queue the task named ``task_name`` (``module.function``). A broker that is down is logged, not raised, so a
    committed change never turns into an error for the person who made it: every task queued this way is also
    redone by a periodic loop (``recover`` resends dispatches, ``follow`` retries cleanups, the beat runs the
    placement loop, the meter and the budget checks)."""
    # Celery names a task after its module; importing that module registers it (a web process has imported no
    # tasks module, and Celery's autodiscovery runs only when a worker starts).
    importlib.import_module(task_name.rpartition(".")[0])
    task = current_app.tasks[task_name]
    try:
        task.delay(*args)
    except Exception as error:  # noqa: BLE001 - any broker failure; the periodic loops make up for it
        log.warning("could not queue %s%s (a periodic loop will do it): %s", task_name, args, error)
        return False
    return True
