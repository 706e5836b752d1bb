"""Output the simulated fleet makes up from a job's life (started on its node, progress, its end), and the
byte pages every file-like output is read in (``clusters/backends/logpages.py``)."""

from __future__ import annotations

import io
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clusters.backends.base import BadOffset, JobSpec, LogsUnavailable, NotFound
from clusters.backends.logpages import read_page
from clusters.backends.simulated import SimulatedBackend
from clusters.backends.simulated.backend import inject


def simulated(endpoint: str, **options: object) -> SimulatedBackend:
    return SimulatedBackend(endpoint, options={"profile": "h100-onprem", "nodes": 4, **options})


def job(job_id: str, workers: int = 2) -> JobSpec:
    nodes = ("h100-000", "h100-001")[:workers]
    return JobSpec(job_id, "sim", workers, 8, 1000, 1024, nodes, time_limit=600, command=("true",))


def test_a_running_job_says_where_each_worker_started_and_how_far_it_got(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = simulated("sim://logs-run", job_seconds=100)
    backend.submit(job("run-1"))
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 35)
    first = backend.logs("run-1")
    assert "worker 0 of 2 started on node h100-000" in first.text
    assert "progress 30%" in first.text
    assert "progress 40%" not in first.text
    assert (first.more, first.complete) == (False, False)
    assert "started on node h100-001" in backend.logs("run-1", "1").text
    monkeypatch.setattr(time, "time", lambda: now + 101)
    rest = backend.logs("run-1", offset=first.next_offset)
    assert "progress 40%" in rest.text
    assert "finished: exit code 0" in rest.text
    assert "started on node" not in rest.text  # it goes on where the first page ended
    assert backend.logs("run-1").text == first.text + rest.text
    assert rest.complete
    assert backend.logs("run-1", tail=1).text.endswith("finished: exit code 0 after 100 s\n")


def test_a_failure_ends_the_output_with_its_words() -> None:
    endpoint = "sim://logs-oom"
    inject(endpoint, "oom")
    backend = simulated(endpoint)
    backend.submit(job("oom-1", workers=1))
    out = backend.logs("oom-1")
    assert out.complete
    assert "(oom_killed, exit code 137)" in out.text


def test_no_such_job_worker_or_offset() -> None:
    backend = simulated("sim://logs-bad")
    backend.submit(job("bad-1"))
    with pytest.raises(NotFound, match="no job"):
        backend.logs("nope")
    with pytest.raises(NotFound, match="workers 0 to 1"):
        backend.logs("bad-1", "2")
    with pytest.raises(BadOffset):
        backend.logs("bad-1", offset="-1")


def test_the_base_backend_has_no_output_to_give() -> None:
    from clusters.backends.base import Backend

    with pytest.raises(LogsUnavailable, match="keep no job output"):
        Backend("x").logs("1")


def page_all(data: bytes, limit: int) -> list[bytes]:
    pages, offset = [], "0"
    while True:
        got, _start, end = read_page(io.BytesIO(data), len(data), offset=offset, tail=None, limit=limit)
        pages.append(got)
        offset = str(end)
        if end >= len(data):
            return pages


@given(st.text(alphabet=st.sampled_from(["a", "é", "€", "😀", "\n"]), max_size=300), st.integers(4, 64))
def test_pages_join_to_the_whole_never_splitting_a_character(text: str, limit: int) -> None:
    data = text.encode()
    pages = page_all(data, limit)
    assert b"".join(pages) == data
    for page in pages:
        assert len(page) <= limit
        page.decode()  # whole characters only


@given(st.lists(st.text(alphabet="xé", max_size=20), max_size=30), st.integers(0, 40), st.booleans())
def test_tail_is_the_last_lines(lines: list[str], tail: int, final_break: bool) -> None:
    text = "\n".join(lines) + ("\n" if final_break and lines else "")
    data = text.encode()
    got, _start, end = read_page(io.BytesIO(data), len(data), offset="", tail=tail, limit=1 << 20)
    expected = text.splitlines(keepends=True)[-tail:] if tail else []
    assert got.decode() == "".join(expected)
    assert end == len(data)
