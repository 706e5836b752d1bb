"""xdist's ``--dist loadgroup`` for pytest 9.2, whose node ids xdist 3.8 can no longer extend.

loadgroup sends the tests marked ``xdist_group(name)`` to one worker, one after another. xdist 3.8 does it by
adding ``@name`` to each test's id in the workers, which pytest 9.2 ignores (``Node.nodeid`` is read from a
structured id now), so the groups silently fall apart. Here the workers write down which test is in which
group, in a file the controller names in the environment they inherit, and the controller's scheduler,
loadgroup's own, reads the groups from there. Remove this once xdist groups under pytest 9.2 by itself.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

ENV = "QM_XDIST_GROUPS"


def write(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker, once the groups are marked: each grouped test's id and group (every worker writes the
    same, whole, with a rename)."""
    path = os.environ.get(ENV)
    if not path or not hasattr(config, "workerinput"):
        return
    groups = {}
    for item in items:
        names = sorted(
            {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
        )
        if names:
            groups[item.nodeid] = "_".join(names)
    partial = Path(f"{path}.{config.workerinput['workerid']}")
    partial.write_text(json.dumps(groups))
    partial.replace(path)


def configure(config: pytest.Config) -> None:
    """In the controller of a loadgroup run, before the workers start: the file they write the groups to."""
    if hasattr(config, "workerinput") or config.getoption("dist", "no") != "loadgroup":
        return
    handle, path = tempfile.mkstemp(prefix="qm-xdist-groups-", suffix=".json")
    os.close(handle)
    os.environ[ENV] = path


def unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and (path := os.environ.pop(ENV, "")):
        Path(path).unlink(missing_ok=True)


def scheduler(config: pytest.Config, log: Any) -> Any:
    """loadgroup's scheduler with the groups the workers wrote (None: not a loadgroup run, xdist's own)."""
    if config.getoption("dist", "no") != "loadgroup" or not os.environ.get(ENV):
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Groups(LoadGroupScheduling):  # type: ignore[misc]  # xdist ships no types
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            # first called once every worker has sent its collection, so every worker has written the file
            if self.groups is None:
                self.groups = json.loads(Path(os.environ[ENV]).read_text() or "{}")
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return Groups(config, log)
