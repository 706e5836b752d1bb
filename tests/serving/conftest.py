"""The serving tests' fixtures: the simulated fleet (the scheduler's) and real replica processes (``harness``)."""

from collections.abc import Iterator

import pytest

from tests.scheduler.conftest import Fleet, fleet  # noqa: F401 - a fixture
from tests.serving.harness import plane, plant, stop_cluster_replicas  # noqa: F401 - a fixture


@pytest.fixture(autouse=True)
def _no_replica_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    on_fleet = "fleet" in request.fixturenames  # a test on the simulated fleet, whose replicas are real processes
    if on_fleet:
        request.getfixturevalue("fleet")  # set up first, so torn down after this fixture stops its replicas
    yield
    if on_fleet:
        stop_cluster_replicas()
