"""Job arrays and sweeps: one submission of many tasks, each a job with its index and parameters in its
environment; a limit on tasks placed at once, honoured across cycles; bulk cancel; requeue of failed tasks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from clusters.backends.simulated import backend as simulated
from clusters.backends.simulated.backend import SimulatedBackend
from scheduler import submission, sweeps
from scheduler.actions import arrays
from scheduler.models import Job, JobArray, JobEvent
from scheduler.placement import snapshot
from scheduler.sweeps import ArrayRequest
from tenancy.models import AuditLog
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db
S = Job.State


def array_request(fleet: Fleet, username: str = "alice", retries: int = 3, **array: Any) -> ArrayRequest:
    team = fleet.world.teams["vision" if username in ("alice", "lena") else "robotics"]
    job = submission.JobRequest(
        team=team,
        name="sweep",
        time_limit=3600,
        image="ghcr.io/lab/train:1",
        command=["python", "train.py"],
        accelerators=1,
        env={"SEED": "7"},
        max_retries=retries,
    )
    return ArrayRequest(job=job, **array)


def submit(fleet: Fleet, username: str = "alice", retries: int = 3, **array: Any) -> JobArray:
    made, created = arrays.submit_array(fleet.user(username), array_request(fleet, username, retries, **array))
    assert created
    return made


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """The environment each attempt was handed to the simulated cluster with, by the attempt's key."""
    seen: dict[str, dict[str, str]] = {}
    original = SimulatedBackend.submit

    def submit(self: SimulatedBackend, spec: Any) -> Any:
        seen[spec.id] = dict(spec.env)
        return original(self, spec)

    monkeypatch.setattr(SimulatedBackend, "submit", submit)
    return seen


def test_ranges_grids_and_lists_expand_to_tasks() -> None:
    assert sweeps.indices("0-9:3") == [0, 3, 6, 9]
    assert sweeps.indices("1,5,10-12") == [1, 5, 10, 11, 12]
    grid = ArrayRequest(job=None, grid={"lr": [0.1, 0.01], "depth": [2, 4]})  # type: ignore[arg-type]
    assert sweeps.tasks(grid) == [
        (0, {"lr": 0.1, "depth": 2}),
        (1, {"lr": 0.1, "depth": 4}),
        (2, {"lr": 0.01, "depth": 2}),
        (3, {"lr": 0.01, "depth": 4}),
    ]
    listed = ArrayRequest(job=None, params=[{"model": "a"}, {"model": "b"}])  # type: ignore[arg-type]
    assert sweeps.tasks(listed) == [(0, {"model": "a"}), (1, {"model": "b"})]


@pytest.mark.parametrize(
    ("array", "field", "words"),
    [
        ({"range": "9-2"}, "range", "'9-2' goes nowhere"),
        ({"range": "a-b"}, "range", "'a-b' is not a range"),
        ({"range": "0-10000"}, "range", "at most 10,000 tasks"),
        ({"grid": {"lr": []}}, "grid", "Give parameter lr a non-empty list"),
        ({"params": [{"bad name": 1}]}, "params", "'bad name' is not a valid parameter name"),
        ({"range": "0-3", "grid": {"lr": [1]}}, "range", "exactly one of"),
        ({"range": "0-3", "max_running": 0}, "max_running", "1 or more"),
    ],
)
def test_a_bad_array_is_refused_naming_its_field_and_nothing_is_written(
    fleet: Fleet, array: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        arrays.submit_array(fleet.user("alice"), array_request(fleet, **array))
    assert words in " ".join(refused.value.message_dict[field])
    assert not JobArray.objects.exists()
    assert not Job.objects.exists()


def test_a_sweep_is_one_array_of_jobs_with_one_audit_record(fleet: Fleet) -> None:
    made = submit(fleet, grid={"lr": [0.1, 0.01], "depth": [2, 4]}, max_running=2)
    tasks = list(Job.objects.filter(array=made).order_by("array_index"))
    assert [(t.array_index, t.array_params, t.name, t.state) for t in tasks] == [
        (0, {"lr": 0.1, "depth": 2}, "sweep [0]", S.PENDING),
        (1, {"lr": 0.1, "depth": 4}, "sweep [1]", S.PENDING),
        (2, {"lr": 0.01, "depth": 2}, "sweep [2]", S.PENDING),
        (3, {"lr": 0.01, "depth": 4}, "sweep [3]", S.PENDING),
    ]
    assert {t.env["SEED"] for t in tasks} == {"7"}  # the shared request, unchanged
    assert JobEvent.objects.filter(job__array=made, reason="submitted").count() == 4
    assert AuditLog.objects.filter(action="array.submitted").count() == 1


def test_each_task_is_handed_its_index_and_parameters(fleet: Fleet, handed: dict[str, dict[str, str]]) -> None:
    made = submit(fleet, params=[{"lr": 0.1, "name": "small"}, {"lr": 0.01, "name": "big"}])
    fleet.cycle()
    envs = {int(env["QM_ARRAY_INDEX"]): env for env in handed.values()}
    assert set(envs) == {0, 1}
    assert envs[1]["QM_ARRAY_ID"] == str(made.pk)
    assert envs[1]["QM_ARRAY_COUNT"] == "2"
    assert envs[1]["QM_PARAM_LR"] == "0.01"
    assert envs[1]["QM_PARAM_NAME"] == "big"
    assert json.loads(envs[1]["QM_PARAMS"]) == {"lr": 0.01, "name": "big"}
    assert envs[0]["SEED"] == "7"


def test_at_most_max_running_tasks_are_placed_across_cycles(fleet: Fleet) -> None:
    made = submit(fleet, range="0-9", max_running=3)
    fleet.cycle()
    placed = Job.objects.filter(array=made).exclude(state=S.PENDING)
    assert placed.count() == 3
    waiting = Job.objects.filter(array=made, state=S.PENDING)
    assert {(j.pending_reason, j.pending_message) for j in waiting} == {
        ("array_limit", f"Waits for its turn: array #{made.pk} runs at most 3 tasks at once.")
    }
    fleet.cycle()  # nothing ended: still three
    assert Job.objects.filter(array=made).exclude(state=S.PENDING).count() == 3
    fleet.follow()
    fleet.run_for(3600)
    fleet.follow()  # the first three succeed
    assert Job.objects.filter(array=made, state=S.SUCCEEDED).count() == 3
    fleet.cycle()
    assert Job.objects.filter(array=made).exclude(state__in=[S.PENDING, S.SUCCEEDED]).count() == 3
    assert sorted(Job.objects.filter(array=made, state=S.SUCCEEDED).values_list("array_index", flat=True)) == [0, 1, 2]


def test_cancel_stops_every_task_and_requeue_gives_failed_tasks_another_try(fleet: Fleet) -> None:
    made = submit(fleet, range="0-3", max_running=2, retries=0)
    first = Job.objects.get(array=made, array_index=0)
    key = f"{first.pk}-1-{first.key_suffix}"
    for cluster in fleet.clusters.values():
        simulated.inject(cluster.endpoint, "exit_code", state_file=cluster.options["state_file"], job=key)
    fleet.cycle()
    fleet.follow()
    first.refresh_from_db()
    assert first.state == S.FAILED
    assert arrays.requeue_failed(fleet.user("alice"), made) == 1
    first.refresh_from_db()
    assert first.state == S.REQUEUED
    summary = arrays.summary(made)
    assert (summary.total, summary.failed) == (4, 0)
    assert Job.objects.filter(array=made, state=S.PENDING).exclude(pending_message="").exists()  # at the limit
    assert arrays.cancel_array(fleet.user("alice"), made, "wrong data") == 4
    assert set(Job.objects.filter(array=made).values_list("state", flat=True)) == {S.CANCELLED}
    # Their wait is over: no reason, place or estimate stays behind (as a single job's cancel leaves none).
    waits = ("pending_reason", "pending_message", "queue_position", "estimated_start")
    assert set(Job.objects.filter(array=made).values_list(*waits)) == {("", "", None, None)}
    with pytest.raises(ValidationError, match="nothing to cancel"):
        arrays.cancel_array(fleet.user("alice"), made)
    assert AuditLog.objects.filter(action__in=["array.cancelled", "array.requeued"]).count() == 2


def test_only_the_owner_the_lead_or_an_admin_may_cancel_or_requeue(fleet: Fleet) -> None:
    made = submit(fleet, range="0-1")
    with pytest.raises(PermissionDenied):
        arrays.cancel_array(fleet.user("bob"), made)  # another team
    with pytest.raises(PermissionDenied):
        arrays.requeue_failed(fleet.user("fiona"), made)  # finance
    assert arrays.cancel_array(fleet.user("lena"), made) == 2  # the team's lead


def test_a_repeated_idempotency_key_returns_the_first_array(fleet: Fleet) -> None:
    request = array_request(fleet, range="0-4")
    request.job.idempotency_key = "sweep-1"
    first, created = arrays.submit_array(fleet.user("alice"), request)
    again, created_again = arrays.submit_array(fleet.user("alice"), request)
    assert (created, created_again, again.pk) == (True, False, first.pk)
    assert Job.objects.count() == 5


def test_failed_tasks_are_listed_first(fleet: Fleet) -> None:
    made = submit(fleet, range="0-2")
    Job.objects.filter(array=made, array_index=2).update(state=S.FAILED)
    assert [t.array_index for t in arrays.tasks_in_order(made)] == [2, 0, 1]


def test_the_engine_is_given_no_more_waiting_tasks_than_the_limit_leaves_room_for(fleet: Fleet) -> None:
    made = submit(fleet, range="0-49", max_running=4)
    other = submit(fleet, range="0-2")  # no limit: every task given
    state, index = snapshot.build(fleet.org)
    seen = {int(j.id) for j in state.pending}
    tasks = dict(Job.objects.filter(array=made).values_list("pk", "array_index"))
    assert sorted(tasks[pk] for pk in seen if pk in tasks) == [0, 1, 2, 3]
    assert set(Job.objects.filter(array=other).values_list("pk", flat=True)) <= seen
    assert index.full_arrays[made.pk][0] == 4
    fleet.cycle()
    state, _ = snapshot.build(fleet.org)
    assert not {int(j.id) for j in state.pending} & set(tasks)  # four placed: no room left
    told = Job.objects.filter(array=made, state=S.PENDING).values_list("pending_reason", flat=True)
    assert set(told) == {"array_limit"}
