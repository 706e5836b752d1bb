"""The job pages: list, job, submit form with its preview, clone, cancel, queues.

Every member of the organization views the jobs (researchers and leads their team's); another team's job is
a 404 on every page and post; a researcher cancels only their own jobs, the lead any of the team's; bad
input is a 400 with the field named and nothing written; the list keeps to a query budget.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from clusters.models import AcceleratorType, Cluster
from governance.models import Queue, Quota
from scheduler.models import Attempt, Job, JobEvent
from scheduler.placement import feasibility
from tenancy.models import AuditLog, Membership
from tenancy.scoping import Role
from tests.billing import factories as billing_factories
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

H100 = "H100-SXM-80GB"
MEMBERS = ["alice", "lena", "fiona", "adam"]  # owner, lead, finance, admin
SUBMITTERS = ["alice", "lena", "adam"]


def signed_in(fleet: Fleet, username: str) -> Client:
    client = Client()
    client.force_login(fleet.user(username))
    return client


def priced(fleet: Fleet, price: float = 4.0) -> None:
    """Prices on the test clusters: ``price`` per H100-hour."""
    billing_factories.priced(Cluster.objects.filter(organization=fleet.org), 0.0, {H100: price})


def form_data(fleet: Fleet, **overrides: Any) -> dict[str, Any]:
    """What the submit form posts for a one-node H100 job of the Vision team."""
    vision = fleet.world.teams["vision"]
    data: dict[str, Any] = {
        "team": vision.pk,
        "choices_team": vision.pk,
        "project": "",
        "name": "resnet",
        "tier": fleet.tiers["normal"].pk,
        "preemptible": "on",
        "accelerator_types": [H100],
        "accelerators": 8,
        "accelerator_milli": 1000,
        "workers": 1,
        "cpu_cores": "16",
        "memory_gib": "64",
        "topology_level": "",
        "topology_mode": "required",
        "time_limit_hours": 2,
        "time_limit_minutes": 30,
        "max_retries": 3,
        "checkpoint_location": "",
        "image": "ghcr.io/lab/train:1",
        "command": "python train.py --lr '3e-4'",
        "script": "",
        "env": "WANDB_PROJECT=resnet\nSEED=1",
        "max_price_per_hour": "",
        "idempotency_key": "",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def pages(job: Job) -> list[str]:
    return [
        "/jobs/",
        "/jobs/rows/",
        f"/jobs/{job.pk}/",
        f"/jobs/{job.pk}/state/",
        "/jobs/queues/",
        "/jobs/queues/rows/",
        f"/jobs/queues/{job.queue_id}/",
        f"/jobs/queues/{job.queue_id}/state/",
    ]


# --- Who sees what --------------------------------------------------------------------------------------


@pytest.mark.parametrize("username", MEMBERS)
def test_every_member_sees_the_teams_jobs(fleet: Fleet, username: str) -> None:
    job = fleet.submit("alice", name="visible-job")
    client = signed_in(fleet, username)
    for path in pages(job):
        response = client.get(path)
        assert response.status_code == 200, path
        expected = {
            "/jobs/queues/": "vision",
            "/jobs/queues/rows/": "vision",
            f"/jobs/{job.pk}/state/": "Submitted to queue vision",
        }
        assert expected.get(path, "visible-job") in response.content.decode(), path


@pytest.mark.parametrize("username", SUBMITTERS)
def test_submitters_get_the_form_and_clone(fleet: Fleet, username: str) -> None:
    job = fleet.submit("alice", name="to-clone")
    client = signed_in(fleet, username)
    assert client.get("/jobs/new/").status_code == 200
    clone = client.get(f"/jobs/{job.pk}/clone/")
    assert clone.status_code == 200
    assert 'value="to-clone (copy)"' in clone.content.decode()


def test_finance_reads_but_submits_nothing(fleet: Fleet) -> None:
    job = fleet.submit("alice")
    fiona = signed_in(fleet, "fiona")
    assert fiona.get("/jobs/new/").status_code == 403
    assert fiona.post("/jobs/new/", form_data(fleet)).status_code == 403
    assert fiona.get(f"/jobs/{job.pk}/clone/").status_code == 403
    assert fiona.post(f"/jobs/{job.pk}/cancel/", {"reason": "no"}).status_code == 403
    assert Job.objects.get(pk=job.pk).state == Job.State.PENDING
    assert "Cancel this job" not in fiona.get(f"/jobs/{job.pk}/").content.decode()


def test_anonymous_is_sent_to_sign_in_and_a_poll_to_the_page(fleet: Fleet) -> None:
    job = fleet.submit("alice")
    for path in [*pages(job), "/jobs/new/", f"/jobs/{job.pk}/clone/"]:
        response = Client().get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/login/?next="), path
    # A poll sends the page htmx polls from (``HX-Current-URL``, as htmx names it) to sign-in, and back there.
    for fragment, page in [
        (f"/jobs/{job.pk}/state/", f"/jobs/{job.pk}/"),
        ("/jobs/rows/", "/jobs/?state=active"),
        (f"/jobs/queues/{job.queue_id}/state/", f"/jobs/queues/{job.queue_id}/"),
        ("/jobs/queues/rows/", "/jobs/queues/"),
    ]:
        poll = Client().get(fragment, headers={"HX-Request": "true", "HX-Current-URL": f"http://testserver{page}"})
        assert (poll.status_code, poll.content) == (200, b""), fragment
        assert poll["HX-Redirect"] == f"/login/?{urlencode({'next': page})}", fragment
    # Without it (or naming another site), to sign-in alone: ``next`` never leaves the site.
    for current in ({}, {"HX-Current-URL": "https://evil.example"}):
        poll = Client().get("/jobs/rows/", headers={"HX-Request": "true", **current})
        assert poll["HX-Redirect"] == "/login/", current


def test_another_teams_job_is_404_everywhere(fleet: Fleet) -> None:
    job = fleet.submit("alice", name="vision-secret")
    for username in ["bob", "mallory", "trent"]:  # Robotics researcher, rival admin, rival lead
        client = signed_in(fleet, username)
        for path in [
            f"/jobs/{job.pk}/",
            f"/jobs/{job.pk}/state/",
            f"/jobs/queues/{job.queue_id}/",
            f"/jobs/queues/{job.queue_id}/state/",
        ]:
            assert client.get(path).status_code == 404, (username, path)
        assert client.get(f"/jobs/{job.pk}/clone/").status_code == 404, username
        assert client.post(f"/jobs/{job.pk}/cancel/", {"reason": "mine"}).status_code == 404, username
        listed = client.get("/jobs/").content.decode()
        assert "vision-secret" not in listed, username
    assert Job.objects.get(pk=job.pk).state == Job.State.PENDING
    assert not AuditLog.objects.filter(action="job.cancelled").exists()


def test_robotics_sees_its_own_job_and_not_visions(fleet: Fleet) -> None:
    fleet.submit("alice", name="vision-job")
    fleet.submit("bob", name="robotics-job")
    listed = signed_in(fleet, "bob").get("/jobs/").content.decode()
    assert "robotics-job" in listed
    assert "vision-job" not in listed
    admin = signed_in(fleet, "adam").get("/jobs/").content.decode()
    assert "robotics-job" in admin
    assert "vision-job" in admin


# --- Cancel ---------------------------------------------------------------------------------------------


@pytest.fixture
def carol(fleet: Fleet) -> User:
    """A second researcher of the Vision team."""
    user = User.objects.create_user("carol", password="pw")
    Membership.objects.create(user=user, organization=fleet.org, team=fleet.world.teams["vision"], role=Role.RESEARCHER)
    return user


def test_a_researcher_cannot_cancel_a_teammates_job_but_the_lead_can(fleet: Fleet, carol: User) -> None:
    job = fleet.submit("alice", name="alices")
    client = Client()
    client.force_login(carol)
    assert "Cancel this job" not in client.get(f"/jobs/{job.pk}/").content.decode()
    assert client.post(f"/jobs/{job.pk}/cancel/", {"reason": "mine now"}).status_code == 403
    assert Job.objects.get(pk=job.pk).state == Job.State.PENDING

    lena = signed_in(fleet, "lena")
    assert "Cancel this job" in lena.get(f"/jobs/{job.pk}/").content.decode()
    response = lena.post(f"/jobs/{job.pk}/cancel/", {"reason": "over budget"})
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert job.state == Job.State.CANCELLED
    last = job.events.order_by("pk").last()
    assert last is not None
    assert last.actor == fleet.user("lena")
    assert last.message == "Cancelled by lena: over budget"
    page = lena.get(f"/jobs/{job.pk}/").content.decode()
    assert "Cancelled by lena: over budget" in page
    assert "Cancel this job" not in page  # nothing left to cancel


def test_the_owner_cancels_a_placed_job_and_cancelling_twice_is_a_400(fleet: Fleet) -> None:
    job = fleet.submit("alice")
    fleet.cycle()
    job.refresh_from_db()
    assert job.state == Job.State.PLACING
    alice = signed_in(fleet, "alice")
    assert alice.post(f"/jobs/{job.pk}/cancel/", {"reason": ""}).status_code == 302
    assert Job.objects.get(pk=job.pk).state == Job.State.CANCELLED
    assert Attempt.objects.get(job=job).outcome == Attempt.Outcome.CANCELLED
    events = JobEvent.objects.filter(job=job).count()
    again = alice.post(f"/jobs/{job.pk}/cancel/", {"reason": ""})
    assert again.status_code == 400
    assert "nothing to cancel" in again.content.decode()
    assert JobEvent.objects.filter(job=job).count() == events


# --- Submit ---------------------------------------------------------------------------------------------


def test_submit_creates_the_job_in_the_units_the_engine_uses(fleet: Fleet) -> None:
    alice = signed_in(fleet, "alice")
    response = alice.post("/jobs/new/", form_data(fleet, memory_gib="0.5", cpu_cores="2.5"))
    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.submitted_by == fleet.user("alice")
    assert job.team == fleet.world.teams["vision"]
    assert (job.cpu, job.memory, job.time_limit) == (2500, 512, 2 * 3600 + 30 * 60)
    assert job.command == ["python", "train.py", "--lr", "3e-4"]
    assert job.env == {"WANDB_PROJECT": "resnet", "SEED": "1"}
    assert job.accelerator_types == [H100]
    assert job.tier == fleet.tiers["normal"]
    assert job.events.get().reason == "submitted"


def test_a_fraction_of_one_gpu_and_a_batch_script(fleet: Fleet) -> None:
    alice = signed_in(fleet, "alice")
    data = form_data(fleet, accelerators=1, accelerator_milli=250, image="", command="", script="#!/bin/sh\necho hi\n")
    assert alice.post("/jobs/new/", data).status_code == 302
    job = Job.objects.get()
    assert (job.accelerators, job.accelerator_milli, job.image, job.script) == (1, 250, "", "#!/bin/sh\necho hi\n")


def test_the_same_form_posted_twice_makes_one_job(fleet: Fleet) -> None:
    alice = signed_in(fleet, "alice")
    data = form_data(fleet, idempotency_key="f3b1c2")
    first = alice.post("/jobs/new/", data)
    second = alice.post("/jobs/new/", data)
    assert first["Location"] == second["Location"]
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"accelerators": 16}, "accelerators", "could hold 16 accelerators"),  # 8-GPU nodes: never fits
        ({"name": ""}, "name", "Give the job a name."),
        ({"image": "", "command": ""}, "image", "Give a container image (and command) or a batch script."),
        ({"env": "NOT A PAIR"}, "env", "Line 1 is not KEY=VALUE"),
        ({"env": "QM_SECRET=1"}, "env", "QM_ names are reserved"),
        ({"command": "python 'unclosed"}, "command", "Cannot read the command"),
        ({"cpu_cores": "0"}, "cpu_cores", "greater than or equal to 0.001"),
        ({"time_limit_hours": 0, "time_limit_minutes": 0}, "time_limit_hours", "between 1 minute and 30 days"),
        ({"accelerators": 2, "accelerator_milli": 500}, "accelerator_milli", "needs exactly one accelerator"),
        ({"topology_level": "galaxy"}, "topology_level", "Select a valid choice"),
        ({"accelerator_types": ["TPU-v9"]}, "accelerator_types", "Select a valid choice"),
        ({"workers": 7, "topology_level": "rack"}, "topology_level", "rack"),  # racks of 4 nodes
    ],
)
def test_bad_input_is_a_400_beside_its_field_and_writes_nothing(
    fleet: Fleet, overrides: dict[str, Any], field: str, message: str
) -> None:
    alice = signed_in(fleet, "alice")
    response = alice.post("/jobs/new/", form_data(fleet, **overrides))
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors, errors
    assert any(message in error for error in errors[field]), errors[field]
    html = response.content.decode()
    box = html[html.index(f'id="errors-{field}"') :]
    assert message.split("'")[0] in box[: box.index("</div>")]
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


def test_every_error_shows_at_once_the_forms_and_the_actions(fleet: Fleet) -> None:
    alice = signed_in(fleet, "alice")
    data = form_data(fleet, cpu_cores="0", env="BAD LINE", accelerators=16)
    response = alice.post("/jobs/new/", data)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert set(errors) == {"cpu_cores", "env", "accelerators"}
    assert "could hold 16 accelerators" in errors["accelerators"][0]  # judged with a stand-in for the CPU
    unnamed = alice.post("/jobs/new/", form_data(fleet, cpu_cores="0", name="", image="", command=""))
    assert set(unnamed.context["form"].errors) == {"cpu_cores", "name", "image"}
    assert not Job.objects.exists()

    preview = alice.post("/jobs/new/preview/", data).content.decode()
    for field in ("cpu_cores", "env", "accelerators"):
        assert f'id="errors-{field}" hx-swap-oob="true"><small class="error"' in preview, field


def test_a_tier_of_another_team_is_refused(fleet: Fleet) -> None:
    alice = signed_in(fleet, "alice")
    page = alice.get("/jobs/new/").content.decode()
    assert "urgent" not in page  # Language's tier is not offered to Vision
    response = alice.post("/jobs/new/", form_data(fleet, tier=fleet.tiers["urgent"].pk))
    assert response.status_code == 400
    assert "tier" in response.context["form"].errors
    assert not Job.objects.exists()


def test_a_team_one_is_not_in_is_refused(fleet: Fleet) -> None:
    response = signed_in(fleet, "alice").post("/jobs/new/", form_data(fleet, team=fleet.world.teams["robotics"].pk))
    assert response.status_code == 400
    assert "team" in response.context["form"].errors
    assert not Job.objects.exists()


def test_clone_is_prefilled_in_the_units_people_type(fleet: Fleet) -> None:
    job = fleet.submit(
        "alice",
        name="orig",
        cpu=2500,
        memory=1536,
        time_limit=5400,
        command=["python", "a b.py"],
        env={"A": "1"},
        accelerators=1,
        accelerator_milli=250,
    )
    form = signed_in(fleet, "alice").get(f"/jobs/{job.pk}/clone/").context["form"]
    assert form.initial["name"] == "orig (copy)"
    assert form.initial["cpu_cores"] == Decimal("2.5")
    assert form.initial["memory_gib"] == Decimal("1.5")
    assert (form.initial["time_limit_hours"], form.initial["time_limit_minutes"]) == (1, 30)
    assert form.initial["command"] == "python 'a b.py'"
    assert form.initial["env"] == "A=1"
    assert form.initial["accelerator_milli"] == 250
    assert form.initial["idempotency_key"]


# --- Preview --------------------------------------------------------------------------------------------


def test_preview_gives_the_cost_and_start(fleet: Fleet) -> None:
    priced(fleet, 4.0)
    response = signed_in(fleet, "alice").post("/jobs/new/preview/", form_data(fleet))
    assert response.status_code == 200
    estimate = response.context["estimate"]
    assert estimate.cost_per_hour == pytest.approx(32.0)
    assert estimate.total_cost == pytest.approx(80.0)  # 2 h 30 min
    assert estimate.starts_now
    html = response.content.decode()
    assert "32.00</strong> per hour" in html
    assert "<strong>now</strong>" in html
    assert 'id="errors-accelerators" hx-swap-oob="true"></div>' in html
    assert not Job.objects.exists()


def test_preview_says_why_it_would_wait(fleet: Fleet) -> None:
    priced(fleet)
    for _ in range(6):  # every node of the fleet taken
        fleet.submit("bob", accelerators=8)
    fleet.cycle()
    response = signed_in(fleet, "alice").post("/jobs/new/preview/", form_data(fleet))
    estimate = response.context["estimate"]
    assert not estimate.starts_now
    assert estimate.reason in {"capacity", "reserved"}
    assert estimate.estimated_start is not None  # the running jobs' time limits say when
    assert estimate.cost_per_hour == pytest.approx(32.0)  # the price of the cheapest fit on the idle fleet
    assert "It would wait" in response.content.decode()


def test_preview_puts_errors_beside_fields_and_names_what_is_missing(fleet: Fleet) -> None:
    alice = signed_in(fleet, "alice")
    response = alice.post("/jobs/new/preview/", form_data(fleet, accelerators=16))
    assert response.status_code == 200  # always, so that htmx swaps it in
    never = response.content.decode()
    assert 'id="errors-accelerators" hx-swap-oob="true"><small class="error" role="alert">' in never
    assert "could hold 16 accelerators" in never
    assert "Fix the fields marked in red" in never

    fresh = alice.post("/jobs/new/preview/", form_data(fleet, name="", image="", command=""))
    assert fresh.status_code == 200
    html = fresh.content.decode()
    assert "Still needed before submitting: a name and a container image or a batch script." in html
    assert 'id="errors-name" hx-swap-oob="true"></div>' in html  # not an error yet: not typed


def test_a_team_the_user_may_not_submit_to_is_the_team_fields_error(fleet: Fleet) -> None:
    robotics = fleet.world.teams["robotics"].pk
    alice = signed_in(fleet, "alice")
    for data in (form_data(fleet, team=robotics), form_data(fleet, team=robotics, choices_team=None)):
        preview = alice.post("/jobs/new/preview/", data)
        assert preview.status_code == 200
        assert 'id="errors-team" hx-swap-oob="true"><small class="error"' in preview.content.decode()
        submitted = alice.post("/jobs/new/", data)
        assert submitted.status_code == 400
        assert "team" in submitted.context["form"].errors
    assert not Job.objects.exists()


def test_preview_redraws_the_project_and_tier_menus_when_the_team_changes(fleet: Fleet) -> None:
    language = fleet.world.teams["language"]
    data = form_data(fleet, team=language.pk)  # the menus on the page were drawn for Vision
    html = signed_in(fleet, "adam").post("/jobs/new/preview/", data).content.decode()
    assert 'id="tier-choice" hx-swap-oob="true"' in html
    assert "urgent" in html  # Language may use it
    assert 'id="project-choice" hx-swap-oob="true"' in html
    assert "Pretraining" in html
    same = signed_in(fleet, "adam").post("/jobs/new/preview/", form_data(fleet)).content.decode()
    assert 'id="tier-choice"' not in same


# --- The job page, the list, the queue ------------------------------------------------------------------


def test_the_job_page_says_why_it_waits_and_where_it_runs(fleet: Fleet) -> None:
    priced(fleet)
    running = [fleet.submit("bob", accelerators=8, name=f"big-{i}") for i in range(6)]
    waiting = fleet.submit("alice", accelerators=8, name="waiting-one")
    fleet.cycle()
    alice = signed_in(fleet, "alice")
    page = alice.get(f"/jobs/{waiting.pk}/").content.decode()
    waiting.refresh_from_db()
    assert waiting.state == Job.State.PENDING
    assert waiting.pending_message
    assert "Why it is waiting" in page
    assert waiting.pending_message in page
    assert f"#{waiting.queue_position} in" in page

    bob = signed_in(fleet, "bob")
    Attempt.objects.filter(job=running[0]).update(admitted_at=timezone.now() - timedelta(hours=1, minutes=30))
    page = bob.get(f"/jobs/{running[0].pk}/").content.decode()
    attempt = Attempt.objects.select_related("cluster").get(job=running[0])
    assert "Where it runs" in page
    assert attempt.cluster.name in page
    assert "48.00" in page  # 32 per hour for 1.5 hours
    for node in attempt.assignments.values_list("node__name", flat=True):
        assert node in page


def test_the_state_block_polls_while_the_job_is_active_and_stops_after(fleet: Fleet) -> None:
    job = fleet.submit("alice")
    alice = signed_in(fleet, "alice")
    assert f'hx-get="/jobs/{job.pk}/state/"' in alice.get(f"/jobs/{job.pk}/").content.decode()
    assert "hx-trigger" in alice.get(f"/jobs/{job.pk}/state/").content.decode()
    alice.post(f"/jobs/{job.pk}/cancel/")
    ended = alice.get(f"/jobs/{job.pk}/state/").content.decode()
    assert "Cancelled" in ended
    assert "hx-trigger" not in ended  # swapped in once more, then no more polls


def test_list_filters_and_search(fleet: Fleet) -> None:
    fleet.submit("alice", name="alpha-run")
    fleet.submit("lena", name="beta-run")
    cancelled = fleet.submit("alice", name="gamma-run")
    signed_in(fleet, "alice").post(f"/jobs/{cancelled.pk}/cancel/")
    alice = signed_in(fleet, "alice")

    def names(query: str) -> set[str]:
        response = alice.get(f"/jobs/?{query}")
        assert response.status_code == 200
        return {job.name for job, _, _ in response.context["rows"]}

    # The list opens on active work; "all states" (an empty state) and "finished" are a click away.
    assert names("") == {"alpha-run", "beta-run"}
    assert names("state=") == {"alpha-run", "beta-run", "gamma-run"}
    assert names("state=finished") == {"gamma-run"}
    assert names("mine=on") == {"alpha-run"}
    assert names("mine=on&state=") == {"alpha-run", "gamma-run"}
    opened = alice.get("/jobs/").content.decode()
    assert '<option value="active" selected>' in opened
    assert '<a href="?state=">all jobs</a>' in opened
    assert '<a href="?state=finished">finished</a>' in opened
    assert names("q=beta") == {"beta-run"}
    assert names("state=cancelled") == {"gamma-run"}
    assert names("state=active") == {"alpha-run", "beta-run"}
    assert names(f"tier={fleet.tiers['high'].pk}") == set()
    assert alice.get("/jobs/?state=bogus").status_code == 400


def test_list_keeps_to_its_query_budget(fleet: Fleet, django_assert_max_num_queries: Any) -> None:
    for i in range(3):
        fleet.submit("alice", name=f"few-{i}")
    fleet.cycle()
    alice = signed_in(fleet, "alice")
    with django_assert_max_num_queries(10) as few:
        assert alice.get("/jobs/").status_code == 200
    for i in range(40):
        fleet.submit("alice" if i % 2 else "lena", name=f"many-{i}", accelerators=i % 3)
    fleet.cycle()
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert alice.get("/jobs/").status_code == 200
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert alice.get("/jobs/rows/?page=2").status_code == 200


def test_queue_page_shows_usage_against_quota_and_waiting_jobs_in_order(fleet: Fleet) -> None:
    h100 = AcceleratorType.objects.get(organization=fleet.org, name=H100)
    queue = Queue.objects.get_or_create(team=fleet.world.teams["vision"], project=None, defaults={"name": "vision"})[0]
    Quota.objects.create(queue=queue, flavor=h100, nominal=Decimal(16), borrowing_limit=Decimal(0))
    feasibility.forget(fleet.org)
    first = fleet.submit("alice", accelerators=8, name="first")
    second = fleet.submit("alice", accelerators=8, name="second")
    third = fleet.submit("alice", accelerators=8, name="third")
    fleet.cycle()
    assert [j.state for j in Job.objects.filter(pk__in=[first.pk, second.pk]).order_by("pk")] == ["placing"] * 2
    response = signed_in(fleet, "lena").get(f"/jobs/queues/{queue.pk}/")
    usage = {u.flavor: u for u in response.context["usage"]}
    assert usage[H100].used == 16
    assert usage[H100].nominal == 16
    assert usage[H100].percent == 100
    waiting = response.context["waiting"]
    assert [job.pk for job, _, _ in waiting] == [third.pk]
    assert waiting[0][2] == "queue quota in use"
    html = response.content.decode()
    assert "third" in html
    assert "first" in html


def test_the_queue_pages_poll_while_visible_as_the_job_list_does(fleet: Fleet) -> None:
    job = fleet.submit("alice", name="queued-one")
    lena = signed_in(fleet, "lena")
    trigger = 'hx-trigger="every 5s, qm-visible" data-poll-while-visible'  # static/js/portal.js holds it while hidden

    page = lena.get(f"/jobs/queues/{job.queue_id}/").content.decode()
    assert f'hx-get="/jobs/queues/{job.queue_id}/state/"' in page
    assert trigger in page
    state = lena.get(f"/jobs/queues/{job.queue_id}/state/")
    assert state.status_code == 200
    html = state.content.decode()
    assert 'id="queue-state"' in html
    assert trigger in html  # swapped in whole, so it keeps polling
    assert "queued-one" in html
    assert "<html" not in html

    listing = lena.get("/jobs/queues/").content.decode()
    assert 'hx-get="/jobs/queues/rows/?"' in listing
    rows = lena.get("/jobs/queues/rows/").content.decode()
    assert 'id="queue-rows"' in rows
    assert trigger in rows
    assert f'data-queue="{job.queue_id}"' in rows
    assert "<html" not in rows


def test_the_queue_list_narrows_to_one_team(fleet: Fleet) -> None:
    vision = fleet.submit("alice").queue
    robotics = fleet.submit("bob").queue
    adam = signed_in(fleet, "adam")

    def listed(query: str) -> set[int]:
        response = adam.get(f"/jobs/queues/rows/?{query}")
        assert response.status_code == 200
        return {q.pk for q in response.context["queues"]}

    assert {vision.pk, robotics.pk} <= listed("")
    assert listed(f"team={vision.team_id}") == {vision.pk}
    page = adam.get(f"/jobs/queues/?team={vision.team_id}").content.decode()
    assert f'hx-get="/jobs/queues/rows/?team={vision.team_id}"' in page  # the poll keeps the filter
    assert adam.get("/jobs/queues/?team=lots").status_code == 400
    assert adam.get(f"/jobs/queues/?team={fleet.world.other_org.teams.get().pk}").status_code == 400  # not visible
    assert listed(f"team={robotics.team_id}") == {robotics.pk}


def test_the_team_page_and_the_job_list_link_to_the_queues(fleet: Fleet) -> None:
    vision = fleet.world.teams["vision"]
    lena = signed_in(fleet, "lena")
    team_page = lena.get(f"/teams/{vision.pk}/").content.decode()
    assert f'href="/jobs/queues/?team={vision.pk}"' in team_page
    assert f'href="/jobs/?team={vision.pk}"' in team_page
    assert 'href="/jobs/queues/"' in lena.get("/jobs/").content.decode()
    assert f'href="/jobs/queues/?team={vision.pk}"' in lena.get(f"/jobs/?team={vision.pk}").content.decode()
