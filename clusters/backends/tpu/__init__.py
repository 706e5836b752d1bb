"""Google Cloud TPU backend (``google-cloud-tpu``, v2 API over REST); see ``backend.py``.

The kind's descriptor is ``kind.py``. The backend (and with it the Google client) is imported only when asked
for (``clusters.backends.kinds.load``), so ``accelerators.py``, which the job submission reads to check a TPU
type, costs nothing else to import."""
