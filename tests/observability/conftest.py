"""Prometheus for the observability tests: Debian's package (``prometheus``, with ``promtool``), which CI
installs (.ci/run); without it the tests that need it skip, except in CI, where they fail."""

from __future__ import annotations

import os
import shutil
import socket

import pytest


def prometheus_binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (Debian's package prometheus; .ci/run installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
