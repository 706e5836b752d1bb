"""Google Cloud TPU backend (``google-cloud-tpu``, v2 API over REST); see ``backend.py``."""

from clusters.backends.tpu.backend import TpuBackend

BACKEND = TpuBackend

__all__ = ["BACKEND", "TpuBackend"]
