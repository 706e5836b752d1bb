"""Tasks queued by name (``common.enqueue``): a process that imported no tasks module still queues them, and a
name that no task has is an error at once, not a message lost."""

from __future__ import annotations

import subprocess
import sys

import pytest
from celery.exceptions import NotRegistered

from common import enqueue


def test_a_fresh_process_queues_a_task_whose_module_it_never_imported() -> None:
    # The web server's case: nothing imported clusters.tasks before an action asks for one of its tasks.
    script = "; ".join(
        [
            "import django, os, sys",
            "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'portal.settings_test')",
            "django.setup()",
            "assert 'clusters.tasks' not in sys.modules",
            # Published to a broker in memory, not run: nothing here may touch a database.
            "from celery import current_app",
            "current_app.conf.update(task_always_eager=False, broker_url='memory://')",
            "from common import enqueue",
            "print(enqueue.send('clusters.tasks.sync_due_clusters'))",
        ]
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


@pytest.mark.parametrize(
    ("name", "error"),
    [("clusters.tasks.no_such_task", NotRegistered), ("clusters.no_such_module.sync", ModuleNotFoundError)],
)
def test_a_name_no_task_has_fails_at_once(name: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        enqueue.send(name)
