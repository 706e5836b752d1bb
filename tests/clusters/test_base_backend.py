"""The backend contract's classification of failures: which errors waiting will not mend."""

from __future__ import annotations

import pytest

from clusters.backends.base import (
    AuthenticationFailed,
    BackendError,
    BadResponse,
    InvalidJob,
    NotAllowed,
    NotFound,
    Refused,
    Unreachable,
    permanent,
)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (InvalidJob("no such partition"), True),
        (Refused("the eviction would violate a disruption budget"), True),
        (NotAllowed("169.254.169.254 is not a cluster endpoint"), True),
        (Unreachable("connection refused"), False),
        (AuthenticationFailed("the token expired"), False),  # credentials may be rotated
        (BadResponse("not JSON"), False),
        (NotFound("no such job"), False),
        (BackendError("HTTP 500"), False),
        (ValueError("not a backend error at all"), False),
    ],
)
def test_permanent(error: BaseException, expected: bool) -> None:
    assert permanent(error) is expected


def test_invalid_job_is_a_refusal_and_keeps_the_far_ends_words_out_of_its_message() -> None:
    error = InvalidJob("the API server refused job qm-1 as invalid", detail="<html>a whole answer</html>")
    assert isinstance(error, Refused)
    assert str(error) == "the API server refused job qm-1 as invalid"
    assert error.detail == "<html>a whole answer</html>"
