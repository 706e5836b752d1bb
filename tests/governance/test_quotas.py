"""Governing quotas: who may change what, what a valid change is (nothing written otherwise), the history
kept, and how a team's split among its projects reaches the engine and holds in the placement loop."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from clusters.models import AcceleratorType
from governance.actions import quotas
from governance.models import Cohort, MemberLimit, PriorityTier, Queue, Quota, QuotaChange
from scheduler import actions
from scheduler.models import Attempt, Job
from scheduler.placement import snapshot
from scheduler.states import PLACED
from tenancy.models import AuditLog, Project
from tenancy.scoping import Action
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db


def team_queue(fleet: Fleet, team: str = "vision") -> Queue:
    return actions.queue_for(fleet.world.teams[team], None)


def flavor(fleet: Fleet) -> str:
    return AcceleratorType.objects.get(organization=fleet.org).name


def written() -> tuple[list[Any], int, int]:
    """Everything a quota change may write."""
    rows = list(Quota.objects.order_by("pk").values_list("pk", "nominal", "borrowing_limit", "lending_limit"))
    return rows, QuotaChange.objects.count(), AuditLog.objects.count()


def give(fleet: Fleet, owner: Queue | Cohort, nominal: Any, user: str = "adam", **limits: Any) -> Any:
    return quotas.set_quota(
        fleet.user(user), owner, flavor=flavor(fleet), nominal=nominal, reason="plan for Q4", **limits
    )


def detection(fleet: Fleet) -> Project:
    return Project.objects.get(team=fleet.world.teams["vision"], slug="detection")


# ------------------------------------------------------------------------------------------ who may do what


def test_an_admin_sets_a_teams_quota_and_it_is_kept_with_who_and_why(fleet: Fleet) -> None:
    change = give(fleet, team_queue(fleet), 16, borrowing_limit=8)
    quota = Quota.objects.get(queue=team_queue(fleet))
    assert (quota.nominal, quota.borrowing_limit, quota.lending_limit) == (Decimal(16), Decimal(8), None)
    assert change is not None
    assert (change.actor_name, change.reason, change.team) == ("adam", "plan for Q4", fleet.world.teams["vision"])
    assert (change.before, change.after) == (
        {"borrowing_limit": None, "nominal": None},
        {"borrowing_limit": "8", "nominal": "16"},
    )
    entry = AuditLog.objects.get(action="quota.changed")
    assert entry.changes == {"borrowing_limit": [None, "8"], "nominal": [None, "16"]}
    assert give(fleet, team_queue(fleet), 16, borrowing_limit=8) is None  # the same values again: no change
    assert QuotaChange.objects.count() == 1


def test_a_lead_sets_lending_but_not_the_teams_own_quota(fleet: Fleet) -> None:
    give(fleet, team_queue(fleet), 16)
    before = written()
    with pytest.raises(PermissionDenied, match="set by an organization admin"):
        give(fleet, team_queue(fleet), 32, user="lena")
    assert written() == before
    assert give(fleet, team_queue(fleet), 16, user="lena", lending_limit=4) is not None
    assert Quota.objects.get(queue=team_queue(fleet)).lending_limit == Decimal(4)


@pytest.mark.parametrize("username", ["alice", "fiona", "mallory", "trent"])
def test_researchers_finance_and_other_organizations_change_nothing(fleet: Fleet, username: str) -> None:
    give(fleet, team_queue(fleet), 16)
    research = Cohort.objects.create(organization=fleet.org, name="research")
    before = written()
    attempts = [
        lambda: give(fleet, team_queue(fleet), 8, user=username),
        lambda: give(fleet, team_queue(fleet), 16, user=username, lending_limit=1),
        lambda: give(fleet, research, 8, user=username),
        lambda: quotas.project_queue(fleet.user(username), detection(fleet), reason="mine"),
        lambda: quotas.set_policy(fleet.user(username), team_queue(fleet), reason="x", flavor_order=[]),
        lambda: quotas.create_cohort(fleet.user(username), fleet.org, name="mine", reason="x"),
    ]
    for attempt in attempts:
        with pytest.raises(PermissionDenied):
            attempt()
    assert written() == before
    assert not Queue.objects.filter(project__isnull=False).exists()


def test_a_lead_governs_only_their_own_team(fleet: Fleet) -> None:
    robotics = team_queue(fleet, "robotics")
    with pytest.raises(PermissionDenied):
        give(fleet, robotics, 0, user="lena", lending_limit=0)
    with pytest.raises(PermissionDenied):
        quotas.set_policy(fleet.user("lena"), robotics, reason="x", flavor_order=[flavor(fleet)])
    assert quotas.set_policy(fleet.user("lena"), team_queue(fleet), reason="x", flavor_order=[flavor(fleet)])
    with pytest.raises(PermissionDenied, match="weight"):
        quotas.set_policy(fleet.user("lena"), team_queue(fleet), reason="x", weight=5)


def test_the_history_is_visible_to_the_teams_members_and_the_organization_only(fleet: Fleet) -> None:
    give(fleet, team_queue(fleet), 16)
    give(fleet, team_queue(fleet, "robotics"), 8)
    quotas.create_cohort(fleet.user("adam"), fleet.org, name="research", reason="one pool")

    def seen(username: str) -> set[str]:
        rows = QuotaChange.objects.for_user(fleet.user(username), Action.VIEW)
        return {row.subject.split(":")[0] for row in rows}

    assert seen("alice") == seen("lena") == {"queue vision"}
    assert seen("bob") == {"queue robotics"}
    assert seen("fiona") == seen("adam") == {"queue vision", "queue robotics", "cohort research"}
    assert seen("mallory") == set()


# -------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"nominal": -1}, "nominal"),
        ({"nominal": "lots"}, "nominal"),
        ({"nominal": "1.0001"}, "nominal"),
        ({"nominal": 10**9}, "nominal"),
        ({"nominal": 8, "borrowing_limit": -2}, "borrowing_limit"),
        ({"nominal": 8, "lending_limit": 9}, "lending_limit"),
        ({"nominal": 8, "flavor": "TPU v9"}, "flavor"),
        ({"nominal": 8, "resource": "disk"}, "resource"),
        ({"nominal": 8, "reason": "  "}, "reason"),
    ],
)
def test_bad_quotas_are_refused_by_field_and_write_nothing(fleet: Fleet, fields: dict[str, Any], named: str) -> None:
    give(fleet, team_queue(fleet), 16)
    before = written()
    values = {"flavor": flavor(fleet), "reason": "more", **fields}
    with pytest.raises(ValidationError) as refused:
        quotas.set_quota(fleet.user("adam"), team_queue(fleet), **values)
    assert named in refused.value.message_dict
    assert written() == before


def test_bad_policies_and_cohorts_are_refused_by_field(fleet: Fleet) -> None:
    adam, queue = fleet.user("adam"), team_queue(fleet)
    research = quotas.create_cohort(adam, fleet.org, name="research", reason="one pool")
    inner = quotas.create_cohort(adam, fleet.org, name="inner", parent=research, reason="nested")
    rival = Cohort.objects.create(organization=fleet.world.other_org, name="theirs")
    before = written()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"flavor_order": [flavor(fleet), flavor(fleet)]}, "flavor_order"),
        ({"flavor_order": ["nope"]}, "flavor_order"),
        ({"flavor_order": flavor(fleet)}, "flavor_order"),
        ({"within_queue": "always"}, "within_queue"),
        ({"reclaim": "sometimes"}, "reclaim"),
        ({"weight": 0}, "weight"),
        ({"weight": "heavy"}, "weight"),
        ({"cohort": rival}, "cohort"),
    ]
    for fields, named in cases:
        with pytest.raises(ValidationError) as refused:
            quotas.set_policy(adam, queue, reason="try", **fields)
        assert named in refused.value.message_dict, fields
    with pytest.raises(ValidationError, match="cycle"):
        quotas.set_parent(adam, research, inner, reason="loop")
    with pytest.raises(ValidationError) as clash:
        quotas.create_cohort(adam, fleet.org, name="vision", reason="clash with the queue")
    assert "name" in clash.value.message_dict
    assert written() == before


# ----------------------------------------------------------------------------------- splitting a team's quota


def test_a_lead_splits_the_teams_quota_among_projects_within_it(fleet: Fleet) -> None:
    give(fleet, team_queue(fleet), 16)
    lena = fleet.user("lena")
    queue = quotas.project_queue(lena, detection(fleet), reason="detection gets its own share")
    assert queue.name == "vision/detection"
    give(fleet, queue, 10, user="lena")
    segmentation = Project.objects.get(team=fleet.world.teams["vision"], slug="segmentation")
    other = quotas.project_queue(lena, segmentation, reason="and segmentation")
    before = written()
    with pytest.raises(ValidationError, match="at most 6 is left"):
        give(fleet, other, 7, user="lena")
    with pytest.raises(ValidationError, match="projects hold 10"):
        give(fleet, team_queue(fleet), 8)  # the admin cannot cut the team below what its projects hold
    assert written() == before
    give(fleet, other, 6, user="lena")
    # Jobs of the project now go to its queue.
    job = fleet.submit("alice", project=segmentation)
    assert job.queue == other


def test_a_split_team_is_a_cohort_in_the_engines_snapshot(fleet: Fleet) -> None:
    research = quotas.create_cohort(fleet.user("adam"), fleet.org, name="research", reason="one pool")
    quotas.set_policy(fleet.user("adam"), team_queue(fleet), reason="join the pool", cohort=research)
    give(fleet, team_queue(fleet), 16, borrowing_limit=4, lending_limit=2)
    give(fleet, quotas.project_queue(fleet.user("lena"), detection(fleet), reason="own share"), 10, user="lena")
    snap, _ = snapshot.build(fleet.org)
    cohorts = {c.name: c for c in snap.cohorts}
    queues = {q.name: q for q in snap.queues}
    h100 = flavor(fleet)
    team = cohorts["team vision"]
    assert team.parent == "research"
    assert (
        team.quotas[(h100, "accelerator")].nominal,
        team.quotas[(h100, "accelerator")].borrowing_limit,
        team.quotas[(h100, "accelerator")].lending_limit,
    ) == (0, 4_000, 2_000)
    # The team's quota is what its queues bring to the team's cohort: 6 + 10.
    assert queues["vision"].cohort == queues["vision/detection"].cohort == "team vision"
    assert queues["vision"].quotas[(h100, "accelerator")].nominal == 6_000  # what the project was not given
    assert queues["vision/detection"].quotas[(h100, "accelerator")].nominal == 10_000
    assert queues["robotics"].cohort is None


def test_a_project_and_the_team_share_the_teams_quota_in_the_loop(fleet: Fleet) -> None:
    give(fleet, team_queue(fleet), 16, borrowing_limit=0)
    queue = quotas.project_queue(fleet.user("lena"), detection(fleet), reason="own share")
    give(fleet, queue, 8, user="lena", borrowing_limit=0)
    project_jobs = [fleet.submit("alice", project=detection(fleet), name=f"det-{i}", accelerators=4) for i in range(3)]
    team_jobs = [fleet.submit("alice", name=f"team-{i}", accelerators=4) for i in range(3)]
    fleet.cycle()
    placed = {j.name for j in Job.objects.filter(state__in=["admitted", "placing", "running"])}
    assert placed == {"det-0", "det-1", "team-0", "team-1"}  # 8 each: the project's own and the rest
    waiting = Job.objects.get(name="det-2")
    assert waiting.pending_reason == "quota_exhausted"
    assert {j.queue.name for j in project_jobs} == {"vision/detection"}
    assert {j.queue.name for j in team_jobs} == {"vision"}


def test_a_quota_change_takes_effect_at_the_next_cycle(fleet: Fleet) -> None:
    give(fleet, team_queue(fleet), 4)
    for i in range(3):
        fleet.submit("alice", name=f"j{i}", accelerators=4)
    fleet.cycle()
    assert Job.objects.filter(state__in=["admitted", "placing"]).count() == 1
    give(fleet, team_queue(fleet), 12)
    fleet.cycle()
    assert Job.objects.filter(state__in=["admitted", "placing"]).count() == 3


def test_lowering_a_quota_below_usage_reclaims_the_newest_work_and_usage_ends_within_it(fleet: Fleet) -> None:
    give(fleet, team_queue(fleet), 16, borrowing_limit=0)
    jobs = [fleet.submit("alice", name=f"j{i}", accelerators=4) for i in range(4)]
    fleet.cycle()
    fleet.follow()
    assert Job.objects.filter(state=Job.State.RUNNING).count() == 4

    give(fleet, team_queue(fleet), 8, borrowing_limit=0)  # the admin halves it: 16 in use, 8 allowed
    report = fleet.cycle()
    assert (report.preempted, report.admitted) == (2, 0)
    victims = Job.objects.filter(state=Job.State.PREEMPTING).order_by("pk")
    assert [j.name for j in victims] == ["j2", "j3"]  # the newest go first
    event = victims[0].events.order_by("pk").last()
    assert event is not None
    assert event.reason == "preempted_over_quota"
    assert "than its quota now allows" in event.message
    assert fleet.cycle().preempted == 0  # while they stop, nothing more is taken

    deadline = Attempt.objects.filter(job__in=victims).values_list("stop_deadline", flat=True).first()
    assert deadline is not None
    later = deadline + timedelta(seconds=1)
    fleet.follow(later)
    fleet.cycle(later)
    in_use = sum(j.accelerators for j in Job.objects.filter(pk__in=[j.pk for j in jobs], state__in=PLACED))
    assert in_use == 8
    waiting = Job.objects.filter(state=Job.State.REQUEUED).order_by("pk")
    assert [(j.name, j.pending_reason) for j in waiting] == [("j2", "quota_exhausted"), ("j3", "quota_exhausted")]


# ------------------------------------------------------------------------------------------ member limits


def test_a_lead_limits_a_member_and_only_that_members_further_jobs_wait(fleet: Fleet) -> None:
    team, alice = fleet.world.teams["vision"], fleet.user("alice")
    lena = fleet.user("lena")
    change = quotas.set_member_limit(lena, team, alice, 8, reason="share the cluster this week")
    assert change is not None
    assert (change.kind, change.after) == ("member", {"accelerators": "8"})
    first = [fleet.submit("alice", name=f"a{i}", accelerators=4) for i in range(3)]
    teammate = fleet.submit("lena", name="l0", accelerators=4)
    fleet.cycle()
    placed = {j.name for j in Job.objects.filter(state__in=PLACED)}
    assert placed == {"a0", "a1", "l0"}
    held = Job.objects.get(pk=first[2].pk)
    assert held.pending_reason == "member_limit"
    assert "allows each member 8" in held.pending_message
    assert teammate.pk in {j.pk for j in Job.objects.filter(state__in=PLACED)}

    quotas.set_member_limit(lena, team, alice, None, reason="back to normal")  # lifted: it starts next cycle
    fleet.cycle()
    assert Job.objects.get(pk=first[2].pk).state in PLACED


def test_member_limits_are_set_by_the_lead_or_an_admin_within_the_team(fleet: Fleet) -> None:
    team = fleet.world.teams["vision"]
    before = written(), list(MemberLimit.objects.values_list("pk", flat=True))
    for username in ("alice", "bob", "fiona", "mallory"):
        with pytest.raises(PermissionDenied):
            quotas.set_member_limit(fleet.user(username), team, fleet.user("alice"), 4, reason="x")
    with pytest.raises(ValidationError) as refused:
        quotas.set_member_limit(fleet.user("lena"), team, fleet.user("bob"), -1, reason="")
    assert set(refused.value.message_dict) == {"member", "accelerators", "reason"}
    assert (written(), list(MemberLimit.objects.values_list("pk", flat=True))) == before
    assert quotas.set_member_limit(fleet.user("adam"), team, fleet.user("alice"), 4, reason="admin too")


# ----------------------------------------------------------------------------------------- priority tiers


def test_a_tiers_bound_on_waiting_is_kept_with_history_and_reaches_the_engine(fleet: Fleet) -> None:
    org, adam = fleet.org, fleet.user("adam")
    change = quotas.set_tier(adam, org, name="batch", value=10, max_wait=6 * 3600, reason="no job waits past 6 h")
    assert change is not None
    assert change.after["max_wait"] == 6 * 3600
    change = quotas.set_tier(adam, org, name="batch", value=10, max_wait="", reason="no bound after all")
    assert change is not None
    assert (change.before, change.after) == ({"max_wait": 6 * 3600}, {"max_wait": None})
    for bad in (599, 31 * 24 * 3600, "soon", 1.5, True):
        with pytest.raises(ValidationError) as refused:
            quotas.set_tier(adam, org, name="batch", value=10, max_wait=bad, reason="x")
        assert set(refused.value.message_dict) == {"max_wait"}
    assert PriorityTier.objects.get(organization=org, name="batch").max_wait is None
    quotas.set_tier(adam, org, name="batch", value=10, max_wait="7200", reason="two hours")
    tiers, _, _ = snapshot.governance(org, (), snapshot.Index(generation=0))
    assert {t.name: t.max_wait for t in tiers}["batch"] == 7200.0


def test_an_admin_creates_and_changes_a_tier_with_history(fleet: Fleet) -> None:
    org, adam = fleet.org, fleet.user("adam")
    vision = fleet.world.teams["vision"]
    change = quotas.set_tier(
        adam,
        org,
        name="deadline",
        value=500,
        preemptible=False,
        grace_seconds=0,
        teams=[vision],
        reason="conference week",
    )
    assert change is not None
    assert (change.kind, change.subject, change.before) == ("tier", "priority tier deadline", {})
    assert change.after["teams"] == ["vision"]
    tier = PriorityTier.objects.get(organization=org, name="deadline")
    assert (tier.value, tier.preemptible, list(tier.teams.all())) == (500, False, [vision])
    # Only vision may submit under it.
    assert tier in actions.tiers_for(vision)
    assert tier not in actions.tiers_for(fleet.world.teams["robotics"])

    change = quotas.set_tier(
        adam,
        org,
        name="deadline",
        value="600",
        preemptible=False,
        grace_seconds=0,
        teams=[vision],
        is_default=True,
        reason="the default this week",
    )
    assert change is not None
    assert (change.before, change.after) == ({"is_default": False, "value": 500}, {"is_default": True, "value": 600})
    assert list(PriorityTier.objects.filter(organization=org, is_default=True)) == [tier]
    assert AuditLog.objects.filter(action="tier.changed").count() == 1
    assert (
        quotas.set_tier(
            adam,
            org,
            name="deadline",
            value=600,
            preemptible=False,
            grace_seconds=0,
            teams=[vision],
            is_default=True,
            reason="same again",
        )
        is None
    )


def test_only_admins_change_tiers_and_bad_values_are_named(fleet: Fleet) -> None:
    org = fleet.org
    before = list(PriorityTier.objects.values())
    for username in ("alice", "lena", "fiona", "mallory"):
        with pytest.raises(PermissionDenied):
            quotas.set_tier(fleet.user(username), org, name="mine", value=1, reason="x")
    with pytest.raises(ValidationError) as refused:
        quotas.set_tier(
            fleet.user("adam"),
            org,
            name="",
            value="1.5",
            grace_seconds=-1,
            preemptible="no",
            max_wait=60,
            teams=[fleet.world.teams["intruders"]],
            reason="",
        )
    assert set(refused.value.message_dict) == {
        "name",
        "value",
        "grace_seconds",
        "preemptible",
        "max_wait",
        "teams",
        "reason",
    }
    assert list(PriorityTier.objects.values()) == before
