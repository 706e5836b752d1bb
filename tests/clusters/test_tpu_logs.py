"""Cloud TPU keeps no program output: ``logs`` finds the job against the local TPU API server and says where
the output is instead; a job it does not know is ``NotFound``."""

from __future__ import annotations

import pytest

from clusters.backends.base import LogsUnavailable, NotFound
from tests.clusters.test_tpu_backend import backend, job
from tests.clusters.test_tpu_backend import server as server  # the fixture
from tests.clusters.tpu_server import TpuServer


def test_a_tpu_job_has_no_output_to_read_and_says_where_it_is(server: TpuServer) -> None:
    tpu = backend(server, reservation="team-res")
    assert tpu.submit(job()) == "qm-42"
    with pytest.raises(LogsUnavailable, match="checkpoint bucket") as refused:
        tpu.logs("qm-42")
    assert "Cloud Logging" in str(refused.value)
    with pytest.raises(NotFound) as unknown:
        tpu.logs("qm-nope")
    assert not isinstance(unknown.value, LogsUnavailable)
