"""What the data plane counts of a service's load (``serving.load.Tally``), which the control loop samples and the
serving SLO reads: every request once, a server error as an error whoever answered it, a 429 past the service's
own rate as answered."""

from __future__ import annotations

from serving.load import Tally, service_key


def _counts(tally: Tally) -> tuple[int, int]:
    taken = tally.take()
    return taken.get(service_key(7, "requests"), 0), taken.get(service_key(7, "errors"), 0)


def test_a_request_retried_on_a_second_replica_counts_once_and_fails_only_if_that_fails() -> None:
    tally = Tally()
    tally.begin(7, replica_id=1)
    tally.end(7, 1, 3.0, error=False)  # never reached: sent on to the next replica
    tally.begin(7, replica_id=2, retry=True)
    tally.end(7, 2, 5.0, error=False)
    assert _counts(tally) == (1, 0)

    tally.begin(7, replica_id=1)
    tally.end(7, 1, 3.0, error=False)
    tally.begin(7, replica_id=2, retry=True)
    tally.end(7, 2, 30_000.0, error=True)  # the second did not answer in time: a 504
    assert _counts(tally) == (1, 1)


def test_the_data_planes_own_answers_are_errors_but_a_rate_limit_is_not() -> None:
    tally = Tally()
    tally.refused(7)  # no replica in time, too many waiting, a stopped service: a 503
    tally.refused(7, error=False)  # past the service's own rate: a 429 keeps its promise
    assert _counts(tally) == (2, 1)
