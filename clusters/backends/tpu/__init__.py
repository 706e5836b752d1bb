"""Google Cloud TPU backend (``google-cloud-tpu``, v2 API over REST); see ``backend.py``.

The backend (and with it the Google client) is imported only when asked for (``clusters.backends.load``), so
``accelerators.py``, which the job submission reads to check a TPU type, costs nothing else to import."""

from __future__ import annotations

from typing import Any

__all__ = ["BACKEND", "TpuBackend"]


def __getattr__(name: str) -> Any:
    if name in ("BACKEND", "TpuBackend"):
        from clusters.backends.tpu.backend import TpuBackend

        return TpuBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
