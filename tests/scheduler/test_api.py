"""The jobs API: submit in people's units, list, read, follow and cancel; every bad field named with nothing
written; another team's job a 404 for every verb."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from clusters.models import Cluster, Node
from governance.models import Queue
from scheduler.models import Attempt, Job, JobEvent
from tenancy import actions as portal_actions
from tenancy.models import AuditLog
from tests.billing import factories as billing_factories
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
BODY: dict[str, Any] = {
    "team": "vision",
    "name": "train",
    "time_limit": "2h",
    "image": "ghcr.io/lab/train:1",
    "command": ["python", "train.py"],
}


def submit(api: Any, username: str = "alice", **fields: Any) -> Any:
    return api(username).post(JOBS, {**BODY, **fields}, format="json")


def priced(fleet: Fleet, per_hour: float) -> None:
    """Give every cluster a price per accelerator-hour (before any submission reads the fleet)."""
    billing_factories.priced(Cluster.objects.filter(organization=fleet.org), per_hour)


# --------------------------------------------------------------------------------------------- submit


def test_submit_takes_peoples_units_and_replies_201_with_the_job(fleet: Fleet, api: Any) -> None:
    response = submit(
        api,
        project="detection",
        accelerator_types=["H100-SXM-80GB"],
        accelerators=1,
        accelerator_fraction=0.25,
        workers=2,
        cpu="2.5",
        memory_gib=16,
        topology_level="rack",
        topology_mode="preferred",
        time_limit="1h30m",
        tier="high",
        preemptible=False,
        checkpoint_location="s3://ckpt/train",
        clusters=["east"],
        regions=["eu"],
        max_price_per_hour="12.50",
        env={"SEED": "1"},
        max_retries=2,
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    job = Job.objects.get()
    assert body["id"] == job.pk
    assert (job.accelerator_milli, job.cpu, job.memory, job.time_limit) == (250, 2500, 16384, 5400)
    assert (job.tier.name, job.project.slug, job.queue.name) == ("high", "detection", "vision")  # type: ignore[union-attr]
    assert list(job.clusters.values_list("slug", flat=True)) == ["east"]
    assert job.max_price_per_hour == Decimal("12.50")
    assert job.submitted_by.username == "alice"
    assert not job.preemptible
    # The answer speaks the same units as the request.
    assert body["state"] == "pending"
    assert [body[k] for k in ("team", "project", "tier", "submitted_by")] == ["vision", "detection", "high", "alice"]
    assert [body[k] for k in ("accelerator_fraction", "cpu", "memory_gib", "time_limit")] == [0.25, 2.5, 16.0, 5400]
    assert (body["clusters"], body["regions"], body["env"]) == (["east"], ["eu"], {"SEED": "1"})
    assert body["placement"] is None
    assert body["attempts"] == []
    assert body["cost_so_far"] == "0.00"
    assert [(e.to_state, e.reason, e.actor.username) for e in job.events.all()] == [("pending", "submitted", "alice")]  # type: ignore[union-attr]


def test_team_by_id_or_left_out_when_the_user_has_one(fleet: Fleet, api: Any) -> None:
    project = fleet.world.project("vision")
    by_id = submit(api, team=fleet.world.teams["vision"].pk, project=project.pk)
    assert by_id.status_code == 201, by_id.json()
    assert by_id.json()["project"] == project.slug
    assert submit(api, project=str(project.pk)).json()["project"] == project.slug  # digits, from a command line
    # A slug of digits that is another project's id: a string is the slug, a number the id.
    numbered = fleet.world.teams["vision"].projects.create(name="Numbered", slug=str(project.pk))
    assert submit(api, project=str(project.pk)).json()["project"] == numbered.slug
    assert Job.objects.get(pk=submit(api, project=project.pk).json()["id"]).project == project
    body = {k: v for k, v in BODY.items() if k != "team"}
    implied = api("alice").post(JOBS, body, format="json")
    assert implied.status_code == 201, implied.json()
    assert implied.json()["team"] == "vision"
    # An admin of the organization may submit to any of its teams, so must say which.
    ambiguous = api("adam").post(JOBS, body, format="json")
    assert ambiguous.status_code == 400
    assert "team" in ambiguous.json()["error"]["fields"]


@pytest.mark.parametrize(
    ("given", "seconds"),
    [(3600, 3600), ("3600", 3600), ("90m", 5400), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), (" 45M ", 2700)],
)
def test_time_limit_in_seconds_or_as_a_duration(fleet: Fleet, api: Any, given: Any, seconds: int) -> None:
    response = submit(api, time_limit=given)
    assert response.status_code == 201, response.json()
    assert Job.objects.get().time_limit == seconds


@pytest.mark.parametrize("given", ["2 hours", "h", "", "-5", "1.5h", "1m2h", True, None, [60], 59, "31d"])
def test_a_bad_time_limit_is_refused_by_name(fleet: Fleet, api: Any, given: Any) -> None:
    response = submit(api, time_limit=given)
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["time_limit"]
    assert not Job.objects.exists()


BAD_INPUT = [
    ({"team": "robotics"}, "team"),  # exists, but not alice's to see
    ({"team": "intruders"}, "team"),  # another organization's
    ({"team": "nonesuch"}, "team"),
    ({"team": True}, "team"),
    ({"team": ["vision"]}, "team"),
    ({"project": 10**9}, "project"),
    ({"project": "manipulation"}, "project"),  # robotics' project
    ({"name": ""}, "name"),
    ({"name": "x" * 121}, "name"),
    ({"name": 42}, "name"),
    ({"accelerator_types": ["B200"]}, "accelerator_types"),
    ({"accelerator_types": "H100-SXM-80GB"}, "accelerator_types"),
    ({"accelerators": 0, "accelerator_types": ["H100-SXM-80GB"]}, "accelerator_types"),
    ({"accelerators": -1}, "accelerators"),
    ({"accelerators": "many"}, "accelerators"),
    ({"accelerators": 65}, "accelerators"),
    ({"accelerator_fraction": 1.5}, "accelerator_fraction"),
    ({"accelerator_fraction": 0}, "accelerator_fraction"),
    ({"accelerator_fraction": 0.25, "accelerators": 2}, "accelerator_fraction"),  # the action's check, renamed
    ({"workers": 0}, "workers"),
    ({"workers": 5000}, "workers"),
    ({"cpu": 0}, "cpu"),
    ({"cpu": "lots"}, "cpu"),
    ({"cpu": "0.0001"}, "cpu"),
    ({"memory_gib": -1}, "memory_gib"),
    ({"topology_level": "galaxy"}, "topology_level"),
    ({"topology_mode": "sometimes"}, "topology_mode"),
    ({"tier": "platinum"}, "tier"),
    ({"tier": "urgent"}, "tier"),  # only the language team may use it
    ({"preemptible": "perhaps"}, "preemptible"),
    ({"clusters": ["nowhere"]}, "clusters"),
    ({"clusters": "east"}, "clusters"),
    ({"regions": ["mars"]}, "regions"),
    ({"max_price_per_hour": -1}, "max_price_per_hour"),
    ({"max_price_per_hour": "1.005"}, "max_price_per_hour"),
    ({"image": "", "script": ""}, "image"),
    ({"command": "python train.py"}, "command"),
    ({"command": ["python", 3]}, "command"),
    ({"env": {"QM_TOKEN": "x"}}, "env"),
    ({"env": {"1X": "x"}}, "env"),
    ({"env": {"DEBUG": 1}}, "env"),
    ({"env": ["A=1"]}, "env"),
    ({"max_retries": 21}, "max_retries"),
    ({"max_retries": -1}, "max_retries"),
    ({"idempotency_key": "k" * 81}, "idempotency_key"),
    ({"gpus": 8}, "gpus"),  # not a field: refused, not ignored
]


@pytest.mark.parametrize(("fields", "named"), BAD_INPUT)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(
    fleet: Fleet, api: Any, fields: dict[str, Any], named: str
) -> None:
    alice = api("alice")
    audit = AuditLog.objects.count()
    response = alice.post(JOBS, {**BODY, **fields}, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (400, "invalid")
    assert named in error["fields"], error
    assert named in error["message"]
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()
    assert AuditLog.objects.count() == audit


def test_missing_fields_and_bodies_that_are_not_an_object(fleet: Fleet, api: Any) -> None:
    alice = api("alice")
    empty = alice.post(JOBS, {}, format="json")
    assert empty.status_code == 400
    assert {"name", "time_limit"} <= set(empty.json()["error"]["fields"])
    listed = alice.post(JOBS, [BODY], format="json")
    assert listed.status_code == 400
    assert "non_field_errors" in listed.json()["error"]["fields"]
    garbage = alice.post(JOBS, "{not json", content_type="application/json")
    assert garbage.status_code == 400
    assert garbage.json()["error"]["code"] == "parse_error"
    form = alice.post(JOBS, {"name": "train"}, format="multipart")
    assert form.status_code == 415
    assert not Job.objects.exists()


ONE_ROUND = [
    ({"cpu": "lots", "workers": 0}, {"cpu", "workers"}),  # a type error and a range error
    ({"gpus": 8, "accelerators": "many", "max_retries": 21}, {"gpus", "accelerators", "max_retries"}),
    ({"name": 42, "accelerators": 16}, {"name", "accelerators"}),  # beside it, a request that never fits
    ({"time_limit": "soon", "image": "", "script": ""}, {"time_limit", "image"}),  # a required field's stand-in
    ({"tier": "platinum", "env": {"DEBUG": 1}, "regions": ["mars"]}, {"tier", "env", "regions"}),
    ({"team": "nonesuch", "workers": 0}, {"team"}),  # no team to judge the rest by
]


@pytest.mark.parametrize(("fields", "named"), ONE_ROUND)
def test_every_bad_field_is_named_in_one_answer(
    fleet: Fleet, api: Any, fields: dict[str, Any], named: set[str]
) -> None:
    alice = api("alice")
    for path in (JOBS, f"{JOBS}preview/"):
        response = alice.post(path, {**BODY, **fields}, format="json")
        assert response.status_code == 400, response.json()
        assert set(response.json()["error"]["fields"]) == named, path
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


def test_a_field_in_error_keeps_the_serializers_message(fleet: Fleet, api: Any) -> None:
    response = submit(api, cpu="lots", workers=0, accelerator_fraction=2)
    fields = response.json()["error"]["fields"]
    assert fields["cpu"] == ["A valid number is required."]
    assert fields["workers"] == ["Workers must be between 1 and 4096."]
    assert fields["accelerator_fraction"] == ["Ensure this value is less than or equal to 1."]


def test_a_request_that_can_never_fit_is_refused_with_the_engines_reason(fleet: Fleet, api: Any) -> None:
    too_big = submit(api, accelerators=16)  # nodes have 8
    assert too_big.status_code == 400
    assert too_big.json()["error"]["fields"]["accelerators"][0]
    topology = submit(api, accelerators=8, workers=8, topology_level="rack")  # racks hold 4 nodes
    assert topology.status_code == 400
    assert "topology_level" in topology.json()["error"]["fields"]
    priced(fleet, 2.0)
    too_dear = submit(api, max_price_per_hour="1.00")
    assert too_dear.status_code == 400
    assert "max_price_per_hour" in too_dear.json()["error"]["fields"]
    assert not Job.objects.exists()


def test_a_teams_first_job_is_accepted_right_after_another_teams(fleet: Fleet, api: Any) -> None:
    # The idle fleet was read (and cached) for alice's job; robotics' queue, made with the team, is in it.
    assert submit(api, "alice").status_code == 201
    response = submit(api, "bob", team="robotics")
    assert response.status_code == 201, response.json()
    assert Job.objects.get(pk=response.json()["id"]).queue == Queue.objects.get(team=fleet.world.teams["robotics"])


def test_a_new_team_has_its_queue_from_the_start(fleet: Fleet, api: Any) -> None:
    speech = portal_actions.create_team(fleet.world.users["adam"], fleet.org, name="Speech")
    assert Queue.objects.filter(team=speech, project=None).values_list("name", flat=True).get() == speech.slug


def test_only_members_who_may_submit_can(fleet: Fleet, api: Any) -> None:
    finance = submit(api, "fiona")  # reads every team, submits to none
    assert finance.status_code == 403
    assert finance.json()["error"]["code"] == "permission_denied"
    implied = api("fiona").post(JOBS, {k: v for k, v in BODY.items() if k != "team"}, format="json")
    assert implied.status_code == 403
    assert not Job.objects.exists()
    assert api("lena").post(JOBS, BODY, format="json").status_code == 201
    assert api("adam").post(JOBS, {**BODY, "team": "robotics"}, format="json").status_code == 201


def test_a_repeated_idempotency_key_replies_200_with_the_first_job(fleet: Fleet, api: Any) -> None:
    first = submit(api, idempotency_key="run-42")
    assert first.status_code == 201
    again = submit(api, idempotency_key="run-42", name="other")
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["name"] == "train"

    alice = api("alice")
    by_header = alice.post(JOBS, BODY, format="json", HTTP_IDEMPOTENCY_KEY="run-43")
    assert by_header.status_code == 201
    assert Job.objects.get(pk=by_header.json()["id"]).idempotency_key == "run-43"
    repeat = alice.post(JOBS, {**BODY, "idempotency_key": "run-43"}, format="json", HTTP_IDEMPOTENCY_KEY="run-43")
    assert (repeat.status_code, repeat.json()["id"]) == (200, by_header.json()["id"])
    clash = alice.post(JOBS, {**BODY, "idempotency_key": "run-44"}, format="json", HTTP_IDEMPOTENCY_KEY="run-45")
    assert clash.status_code == 400
    assert "idempotency_key" in clash.json()["error"]["fields"]
    # Keys are per user: Lena's run-42 is a job of her own.
    lenas = submit(api, "lena", idempotency_key="run-42")
    assert lenas.status_code == 201
    assert Job.objects.count() == 3


# ----------------------------------------------------------------------------------------------- read


def test_list_filters_and_pages(fleet: Fleet, api: Any) -> None:
    a1 = fleet.submit("alice", name="resnet", tier=fleet.tiers["high"])
    a2 = fleet.submit("alice", name="vit", project=fleet.world.project("vision"))
    l1 = fleet.submit("lena", name="sweep")
    b1 = fleet.submit("bob", name="grasp")
    alice = api("alice")

    def ids(query: str = "", client: Any = alice) -> list[int]:
        response = client.get(JOBS + query)
        assert response.status_code == 200, response.json()
        return [job["id"] for job in response.json()["results"]]

    assert ids() == [l1.pk, a2.pk, a1.pk]  # newest first, only her team's
    assert ids("?submitted_by=me") == [a2.pk, a1.pk]
    assert ids("?submitted_by=lena") == [l1.pk]
    assert ids("?state=pending") == [l1.pk, a2.pk, a1.pk]
    assert ids("?state=running,succeeded") == []
    assert ids("?state=active") == [l1.pk, a2.pk, a1.pk]
    assert ids("?state=final") == []
    assert ids("?team=vision") == ids(f"?team={fleet.world.teams['vision'].pk}") == [l1.pk, a2.pk, a1.pk]
    assert ids("?team=robotics") == []  # another team's name finds nothing, not its jobs
    assert ids("?project=detection") == [a2.pk]
    assert ids("?tier=high") == [a1.pk]
    assert ids("?queue=vision") == [l1.pk, a2.pk, a1.pk]
    assert ids("?q=RES") == [a1.pk]
    bad = alice.get(JOBS + "?state=pending,bogus")
    assert bad.status_code == 400
    assert "state" in bad.json()["error"]["fields"]
    page = alice.get(JOBS + "?page_size=2").json()
    assert page["count"] == 3
    assert len(page["results"]) == 2
    assert page["next"]
    row = page["results"][0]
    assert (row["name"], row["state"], row["team"], row["submitted_by"], row["cluster"]) == (
        "sweep",
        "pending",
        "vision",
        "lena",
        None,
    )
    assert ids(client=api("fiona")) == [b1.pk, l1.pk, a2.pk, a1.pk]  # finance reads every team's
    assert ids(client=api("adam")) == [b1.pk, l1.pk, a2.pk, a1.pk]
    assert ids(client=api("bob")) == [b1.pk]
    assert ids(client=api("mallory")) == []  # another organization's admin
    assert ids(client=api("trent")) == []


def test_detail_shows_placement_cost_so_far_and_why_others_wait(fleet: Fleet, api: Any) -> None:
    priced(fleet, 2.0)
    running = fleet.submit("alice", name="big", accelerators=8, workers=2, topology_level="rack")
    waiting = [fleet.submit("lena", name=f"fill-{i}", accelerators=8) for i in range(5)]
    fleet.cycle()
    fleet.follow()
    attempt = Attempt.objects.get(job=running)
    Attempt.objects.filter(pk=attempt.pk).update(admitted_at=timezone.now() - timedelta(minutes=30))

    body = api("alice").get(f"{JOBS}{running.pk}/").json()
    assert body["state"] == "running"
    placement = body["placement"]
    assert placement["cluster"] == attempt.cluster.slug
    assert placement["flavor"] == "H100-SXM-80GB"
    assert Decimal(placement["cost_per_hour"]) == Decimal("32")  # 16 GPUs at 2.00
    assert sum(node["workers"] for node in placement["nodes"]) == 2
    assert all(len(node["accelerators"]) == 8 for node in placement["nodes"])
    assert body["cluster"] == attempt.cluster.slug
    assert Decimal(body["cost_so_far"]) == pytest.approx(Decimal("16.00"), abs=Decimal("0.05"))
    attempts = [(a["number"], a["outcome"], a["cluster"]) for a in body["attempts"]]
    assert attempts == [(1, "active", attempt.cluster.slug)]

    left = [job for job in waiting if Job.objects.get(pk=job.pk).state == Job.State.PENDING]
    assert len(left) == 1  # 6 nodes: 2 for the big one, 4 for the fill
    pending = api("alice").get(f"{JOBS}{left[0].pk}/").json()
    assert pending["placement"] is None
    assert pending["pending_reason"] in {"capacity", "reserved"}
    assert pending["pending_message"]
    assert pending["queue_position"] is not None


def test_events_are_the_timeline_and_can_be_followed(fleet: Fleet, api: Any) -> None:
    job = fleet.submit("alice")
    fleet.cycle()
    fleet.follow()
    alice = api("alice")
    events = alice.get(f"{JOBS}{job.pk}/events/").json()
    assert [(e["from_state"], e["to_state"], e["reason"]) for e in events["results"]] == [
        ("", "pending", "submitted"),
        ("pending", "admitted", "admitted"),
        ("admitted", "placing", "dispatching"),
        ("placing", "running", "started"),
    ]
    assert events["results"][0]["actor"] == "alice"
    second = events["results"][1]["id"]
    after = alice.get(f"{JOBS}{job.pk}/events/?after={second}").json()["results"]
    assert [e["reason"] for e in after] == ["dispatching", "started"]
    assert alice.get(f"{JOBS}{job.pk}/events/?after=soon").status_code == 400
    # An id in ASCII digits within 64 bits: "²" passed str.isdigit() and failed int(), a 500.
    for value in ("%C2%B2", "9" * 30, "-1"):
        refused = alice.get(f"{JOBS}{job.pk}/events/?after={value}")
        assert (refused.status_code, list(refused.json()["error"]["fields"])) == (400, ["after"])
    assert api("fiona").get(f"{JOBS}{job.pk}/events/").json()["count"] == 4


# --------------------------------------------------------------------------------------------- cancel


def test_cancel_own_job_then_again_is_a_conflict(fleet: Fleet, api: Any) -> None:
    job = fleet.submit("alice")
    fleet.cycle()
    alice = api("alice")
    response = alice.post(f"{JOBS}{job.pk}/cancel/", {"reason": "wrong data"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["state"] == "cancelled"
    assert response.json()["placement"] is None
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    assert Attempt.objects.get(job=job).outcome == Attempt.Outcome.CANCELLED
    last = job.events.last()
    assert last is not None
    assert (last.reason, last.actor, last.message) == (
        "cancelled",
        fleet.user("alice"),
        "Cancelled by alice: wrong data",
    )
    assert AuditLog.objects.filter(action="job.cancelled", reason="wrong data").exists()

    again = alice.post(f"{JOBS}{job.pk}/cancel/", {}, format="json")
    assert again.status_code == 409
    error = again.json()["error"]
    assert (error["status"], error["code"]) == (409, "conflict")
    assert "cancelled" in error["fields"]["state"][0]
    assert job.events.count() == 4


def test_a_researcher_cannot_cancel_a_teammates_job_but_the_lead_can(fleet: Fleet, api: Any) -> None:
    lenas = fleet.submit("lena")
    alices = fleet.submit("alice")
    assert api("alice").post(f"{JOBS}{lenas.pk}/cancel/", {}, format="json").status_code == 403
    assert api("fiona").post(f"{JOBS}{alices.pk}/cancel/", {}, format="json").status_code == 403  # reads, no more
    assert Job.objects.get(pk=lenas.pk).state == Job.State.PENDING
    assert Job.objects.get(pk=alices.pk).state == Job.State.PENDING
    response = api("lena").post(f"{JOBS}{alices.pk}/cancel/", {"reason": "queue cleanup"}, format="json")
    assert response.status_code == 200
    assert Job.objects.get(pk=alices.pk).state == Job.State.CANCELLED
    assert api("adam").post(f"{JOBS}{lenas.pk}/cancel/", {}, format="json").status_code == 200
    bad = api("lena").post(f"{JOBS}{lenas.pk}/cancel/", {"reason": "x" * 2001}, format="json")
    assert bad.status_code == 400
    assert "reason" in bad.json()["error"]["fields"]


@pytest.mark.parametrize("username", ["bob", "mallory", "trent"])
def test_another_teams_job_is_404_for_every_verb(fleet: Fleet, api: Any, username: str) -> None:
    job = fleet.submit("alice")
    client = api(username)
    for path in (f"{JOBS}{job.pk}/", f"{JOBS}{job.pk}/events/"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
    assert client.post(f"{JOBS}{job.pk}/cancel/", {"reason": "mine now"}, format="json").status_code == 404
    assert client.delete(f"{JOBS}{job.pk}/").status_code in (404, 405)
    assert client.patch(f"{JOBS}{job.pk}/", {"name": "x"}, format="json").status_code in (404, 405)
    assert job.pk not in [j["id"] for j in client.get(JOBS).json()["results"]]
    job.refresh_from_db()
    assert (job.state, job.name, job.events.count()) == (Job.State.PENDING, "train", 1)


def test_anonymous_gets_401(fleet: Fleet) -> None:
    from tests.conftest import api_client

    anonymous = api_client()
    assert anonymous.get(JOBS).status_code == 401
    assert anonymous.post(JOBS, BODY, format="json").status_code == 401
    assert not Job.objects.exists()


# -------------------------------------------------------------------------------------------- preview


def test_preview_says_price_and_start_and_writes_nothing(fleet: Fleet, api: Any) -> None:
    priced(fleet, 2.0)
    queues = list(Queue.objects.values_list("pk", flat=True))
    alice = api("alice")
    now = alice.post(f"{JOBS}preview/", {**BODY, "accelerators": 4}, format="json")
    assert now.status_code == 200, now.json()
    assert now.json()["starts_now"] is True
    assert now.json()["cost_per_hour"] == pytest.approx(8.0)
    assert now.json()["reason"] == ""
    assert not Job.objects.exists()

    for i in range(6):
        fleet.submit("lena", name=f"fill-{i}", accelerators=8)
    fleet.cycle()
    later = alice.post(f"{JOBS}preview/", {**BODY, "accelerators": 8}, format="json").json()
    assert later["starts_now"] is False
    assert later["reason"] in {"capacity", "reserved", "quota_exhausted"}
    assert later["message"]
    assert later["cost_per_hour"] == pytest.approx(16.0)
    assert Job.objects.count() == 6

    bad = alice.post(f"{JOBS}preview/", {**BODY, "cpu": "lots"}, format="json")
    assert (bad.status_code, list(bad.json()["error"]["fields"])) == (400, ["cpu"])
    never = alice.post(f"{JOBS}preview/", {**BODY, "accelerators": 16}, format="json")
    assert never.status_code == 400
    assert "accelerators" in never.json()["error"]["fields"]
    assert api("fiona").post(f"{JOBS}preview/", BODY, format="json").status_code == 403
    assert Job.objects.count() == 6
    assert list(Queue.objects.values_list("pk", flat=True)) == queues


def test_a_preview_asked_again_before_the_next_cycle_does_not_read_the_fleet_again(fleet: Fleet, api: Any) -> None:
    alice = api("alice")
    node_table = Node._meta.db_table
    reads = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            assert alice.post(f"{JOBS}preview/", BODY, format="json").status_code == 200
        reads.append(sum(f'FROM "{node_table}"' in q["sql"] for q in queries.captured_queries))
    assert reads == [2, 0]  # the first: the idle fleet (for "can it ever fit") and today's
    fleet.submit("lena", accelerators=8)
    fleet.cycle()  # the loop applied since: the next preview reads today's fleet again
    with CaptureQueriesContext(connection) as queries:
        again = alice.post(f"{JOBS}preview/", {**BODY, "accelerators": 8}, format="json")
    assert sum(f'FROM "{node_table}"' in q["sql"] for q in queries.captured_queries) == 1
    assert again.json()["starts_now"] is True


def test_list_and_detail_cost_the_same_queries_for_few_or_many_jobs(fleet: Fleet, api: Any) -> None:
    alice = api("alice")
    alice.get(JOBS)  # the token's last use is written once a minute: not in the count below

    def queries(path: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert alice.get(path).status_code == 200
        return len(captured)

    first = fleet.submit("alice", accelerators=2, workers=2)
    fleet.cycle()
    few, one = queries(JOBS), queries(f"{JOBS}{first.pk}/")
    for i in range(10):
        fleet.submit("alice", name=f"more-{i}", accelerators=2, workers=2)
    fleet.cycle()
    assert Attempt.objects.count() > 5
    assert queries(JOBS) == few <= 6  # token, count, jobs, attempts, their nodes
    assert queries(f"{JOBS}{first.pk}/") == one <= 6
