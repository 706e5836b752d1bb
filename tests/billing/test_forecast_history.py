"""The forecast's history from the database: usage and capacity records summed per flavor and day, waits in the
queue spread over their days, the pending backlog, flavors resolved, and an organization's forecast."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from billing import forecast_history
from billing.forecast_history import (
    backlog_hours,
    capacity_hours,
    fleet,
    forecast_organization,
    queued_hours,
    read_history,
    used_hours,
)
from billing.models import CapacityRecord, UsageRecord
from clusters.capacity import CapacityType
from clusters.models import AcceleratorType, Cluster, Node
from governance.models import PriorityTier, Queue
from scheduler.models import Attempt, Job
from tests.conftest import World

NOW = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)  # a Monday, noon
SINCE = datetime(2025, 1, 1, tzinfo=UTC)


def at(day: int, hour: float = 0, month: int = 3) -> datetime:
    return datetime(2025, month, day, tzinfo=UTC) + timedelta(hours=hour)


@dataclass
class Lab:
    """The demo organization with a cluster of H100 (2 nodes of 8) and A100 (1 node of 4) nodes, and a way
    to write jobs, attempts, usage and capacity records as the scheduler and the meter would."""

    world: World
    cluster: Cluster
    flavors: dict[str, AcceleratorType]
    nodes: dict[str, list[Node]]
    tier: PriorityTier
    running: dict[str, Attempt] = field(default_factory=dict)

    @property
    def org(self) -> Any:
        return self.world.org

    def job(
        self,
        submitted: datetime,
        *,
        attempts: Sequence[tuple[datetime, datetime | None, str]] = (),
        state: str = Job.State.SUCCEEDED,
        types: Sequence[str] = (),
        accelerators: int = 1,
        workers: int = 1,
        milli: int = 1000,
        time_limit: int = 3600,
        finished: datetime | None = None,
        team: str = "vision",
    ) -> Job:
        queue = Queue.objects.get(team=self.world.teams[team], project=None)
        job = Job.objects.create(
            team=self.world.teams[team],
            queue=queue,
            submitted_by=self.world.users["alice"],
            name="train",
            accelerator_types=list(types),
            accelerators=accelerators,
            workers=workers,
            accelerator_milli=milli,
            time_limit=time_limit,
            tier=self.tier,
            state=state,
            state_changed_at=finished or submitted,
            submitted_at=submitted,
            attempt=len(attempts),
            finished_at=finished,
        )
        for number, (admitted, ended, flavor) in enumerate(attempts, start=1):
            outcome = Attempt.Outcome.SUCCEEDED if ended else Attempt.Outcome.ACTIVE
            Attempt.objects.create(
                job=job,
                number=number,
                cluster=self.cluster,
                flavor=flavor,
                admitted_at=admitted,
                ended_at=ended,
                outcome=outcome,
            )
        return job

    def usage(self, day: date, seconds: int, milli: int, flavor: str = "H100", node: int = 0) -> UsageRecord:
        if flavor not in self.running:  # one attempt's records, one a day and node
            self.running[flavor] = self.job(at(1), attempts=[(at(1), None, flavor)]).attempts.get()
        attempt = self.running[flavor]
        job = attempt.job
        start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
        return UsageRecord.objects.create(
            organization=self.org,
            team=job.team,
            user=job.submitted_by,
            job=job,
            attempt=attempt,
            cluster=self.cluster,
            node=self.nodes[flavor][node],
            flavor=self.flavors[flavor],
            capacity_type=CapacityType.ON_PREM,
            day=day,
            start=start,
            end=start + timedelta(seconds=seconds),
            seconds=seconds,
            milli=milli,
        )

    def capacity(self, day: date, seconds: int, flavor: str = "H100", node: int = 0, accelerators: int = 8) -> None:
        start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
        CapacityRecord.objects.create(
            organization=self.org,
            cluster=self.cluster,
            node=self.nodes[flavor][node],
            flavor=self.flavors[flavor],
            capacity_type=CapacityType.ON_PREM,
            accelerators=accelerators,
            day=day,
            start=start,
            end=start + timedelta(seconds=seconds),
            seconds=seconds,
        )

    def history(self, days: int, today: date, flavor: str = "H100") -> None:
        """``days`` days to yesterday of ``flavor``: a node of 8 present all day, used 10 to 16 hours a day by
        the day of the week."""
        for i in range(1, days + 1):
            day = today - timedelta(days=i)
            self.capacity(day, 86_400, flavor)
            self.usage(day, 3600 * (10 + day.weekday()), 8000, flavor)


def per_flavor(hours: dict[Any, float]) -> dict[Any, float]:
    """Hours keyed (flavor, team, day) or (flavor, team) summed over the teams: (flavor, day), or flavor."""
    out: dict[Any, float] = {}
    for key, value in hours.items():
        short = (key[0], key[2]) if len(key) == 3 else key[0]
        out[short] = out.get(short, 0.0) + value
    return out


def test_demand_is_read_per_team(lab: Lab):
    vision, robotics = lab.world.teams["vision"], lab.world.teams["robotics"]
    lab.job(at(5, 8), types=["H100"], accelerators=4, attempts=[(at(5, 10), at(5, 11), "H100")])
    lab.job(at(5, 8), types=["H100"], accelerators=2, attempts=[(at(5, 9), at(5, 11), "H100")], team="robotics")
    lab.job(at(9, 20), types=["H100"], state=Job.State.PENDING, time_limit=7200, team="robotics")
    assert queued_hours(lab.org, SINCE, NOW) == pytest.approx(
        {("H100", vision.pk, date(2025, 3, 5)): 8.0, ("H100", robotics.pk, date(2025, 3, 5)): 2.0}
        | {("H100", robotics.pk, date(2025, 3, 9)): 4.0, ("H100", robotics.pk, date(2025, 3, 10)): 12.0}
    )
    assert backlog_hours(lab.org) == pytest.approx({("H100", robotics.pk): 2.0})
    found = {h.flavor: h for h in read_history(lab.org, NOW)}["H100"]
    assert found.teams["Robotics"][-5:] == pytest.approx([2.0, 0, 0, 0, 4.0])
    assert found.teams["Vision"][-5:] == pytest.approx([8.0, 0, 0, 0, 0])
    assert [sum(v) for v in zip(*found.teams.values(), strict=True)] == pytest.approx(found.demand)
    assert found.team_backlog == pytest.approx({"Robotics": 2.0})


@pytest.fixture
def lab(world: World) -> Lab:
    org = world.org
    flavors = {name: AcceleratorType.objects.create(organization=org, name=name) for name in ("A100", "H100")}
    cluster = Cluster.objects.create(
        organization=org,
        name="lab",
        slug="lab",
        kind="simulated",
        endpoint="sim://forecast-lab",
        region="eu",
    )
    nodes = {
        "H100": [
            Node.objects.create(cluster=cluster, name=f"h{i}", accelerator=flavors["H100"], accelerators=8)
            for i in range(2)
        ],
        "A100": [Node.objects.create(cluster=cluster, name="a0", accelerator=flavors["A100"], accelerators=4)],
    }
    tier = PriorityTier.objects.create(organization=org, name="normal", value=0, is_default=True)
    return Lab(world, cluster, flavors, nodes, tier)


def test_a_job_queued_two_hours_for_four_accelerators_adds_eight_queued_hours_on_its_day(lab: Lab):
    lab.job(at(5, 8), types=["H100"], accelerators=4, attempts=[(at(5, 10), at(5, 11), "H100")])
    assert per_flavor(queued_hours(lab.org, SINCE, NOW)) == {("H100", date(2025, 3, 5)): pytest.approx(8.0)}


def test_a_wait_over_midnights_counts_on_each_day_it_covers(lab: Lab):
    # Two workers of one accelerator wait from 22:00 on the 6th to 02:00 on the 8th.
    lab.job(at(6, 22), types=["H100"], workers=2, attempts=[(at(8, 2), at(8, 3), "H100")])
    assert per_flavor(queued_hours(lab.org, SINCE, NOW)) == pytest.approx(
        {("H100", date(2025, 3, 6)): 4.0, ("H100", date(2025, 3, 7)): 48.0, ("H100", date(2025, 3, 8)): 4.0}
    )


def test_a_requeued_job_waits_again_until_its_next_admission(lab: Lab):
    lab.job(at(5, 1), types=["H100"], attempts=[(at(5, 2), at(5, 6), "H100"), (at(5, 9), at(5, 12), "H100")])
    assert per_flavor(queued_hours(lab.org, SINCE, NOW)) == {("H100", date(2025, 3, 5)): pytest.approx(1.0 + 3.0)}


def test_jobs_still_waiting_count_until_now_and_cancelled_ones_until_they_left(lab: Lab):
    lab.job(at(9, 20), types=["H100"], state=Job.State.PENDING, accelerators=2)  # 4 h yesterday, 12 h today
    lab.job(at(9, 0), types=["A100"], state=Job.State.REQUEUED, attempts=[(at(9, 1), at(9, 22), "A100")])
    lab.job(at(4, 10), types=["H100"], state=Job.State.CANCELLED, finished=at(4, 11))
    lab.job(
        at(3, 10),
        types=["H100"],
        state=Job.State.CANCELLED,
        finished=at(3, 15),
        attempts=[(at(3, 11), at(3, 15), "H100")],
    )  # cancelled while running: no wait after
    assert per_flavor(queued_hours(lab.org, SINCE, NOW)) == pytest.approx(
        {
            ("H100", date(2025, 3, 9)): 8.0,
            ("H100", date(2025, 3, 10)): 24.0,
            ("A100", date(2025, 3, 9)): 1.0 + 2.0,
            ("A100", date(2025, 3, 10)): 12.0,
            ("H100", date(2025, 3, 4)): 1.0,
            ("H100", date(2025, 3, 3)): 1.0,
        }
    )


def test_a_share_of_an_accelerator_waits_as_that_share(lab: Lab):
    lab.job(at(5, 0), types=["H100"], milli=250, attempts=[(at(5, 4), at(5, 5), "H100")])
    assert per_flavor(queued_hours(lab.org, SINCE, NOW)) == {("H100", date(2025, 3, 5)): pytest.approx(1.0)}


def test_waits_before_the_window_are_cut_at_its_start(lab: Lab):
    lab.job(at(31, 12, month=12) - timedelta(days=365), types=["H100"], attempts=[(at(1, 6, month=1), None, "H100")])
    assert per_flavor(queued_hours(lab.org, SINCE, NOW)) == {("H100", date(2025, 1, 1)): pytest.approx(6.0)}


def test_a_jobs_flavor_is_its_first_type_else_where_it_ran_else_its_queues_first(lab: Lab):
    lab.job(at(5, 0), types=["A100", "H100"], attempts=[(at(5, 1), at(5, 2), "H100")])
    lab.job(at(5, 0), attempts=[(at(5, 2), at(5, 3), "H100")])
    robotics = Queue.objects.get(team=lab.world.teams["robotics"], project=None)
    robotics.flavor_order = ["A100"]
    robotics.save()
    lab.job(at(5, 0), team="robotics", state=Job.State.CANCELLED, finished=at(5, 4))
    lab.job(at(5, 0), state=Job.State.CANCELLED, finished=at(5, 8))  # names none: the caller's default
    assert per_flavor(queued_hours(lab.org, SINCE, NOW)) == pytest.approx(
        {("A100", date(2025, 3, 5)): 1.0 + 4.0, ("H100", date(2025, 3, 5)): 2.0, (None, date(2025, 3, 5)): 8.0}
    )


def test_jobs_without_accelerators_and_other_organizations_are_no_demand(lab: Lab):
    lab.job(at(5, 0), accelerators=0, types=["H100"], state=Job.State.PENDING)
    assert per_flavor(queued_hours(lab.org, SINCE, NOW)) == {}
    assert per_flavor(queued_hours(lab.world.other_org, SINCE, NOW)) == {}


def test_usage_and_capacity_records_sum_per_flavor_and_day(lab: Lab):
    day = date(2025, 3, 5)
    lab.usage(day, 3600, 1000)  # one accelerator for an hour
    lab.usage(day, 1800, 2000, node=1)  # two for half an hour
    lab.usage(day, 86_400, 64_000, flavor="A100")  # 64 all day: 5.5e9 milli-seconds, past 32-bit integers
    lab.usage(day - timedelta(days=1), 7200, 500)
    assert per_flavor(used_hours(lab.org, date(2025, 3, 1), date(2025, 3, 9))) == pytest.approx(
        {
            (lab.flavors["H100"].pk, day): 2.0,
            (lab.flavors["A100"].pk, day): 64 * 24.0,
            (lab.flavors["H100"].pk, date(2025, 3, 4)): 1.0,
        }
    )
    assert per_flavor(used_hours(lab.org, date(2025, 3, 5), date(2025, 3, 5))).keys() == {
        (lab.flavors["H100"].pk, day),
        (lab.flavors["A100"].pk, day),
    }
    lab.capacity(day, 86_400)
    lab.capacity(day, 43_200, node=1)
    assert capacity_hours(lab.org, day, day) == {(lab.flavors["H100"].pk, day): pytest.approx(8 * 24 + 8 * 12)}
    assert used_hours(lab.world.other_org, day, day) == {}
    assert capacity_hours(lab.world.other_org, day, day) == {}


def test_the_backlog_is_what_waiting_jobs_ask_for_and_the_fleet_what_is_present(lab: Lab):
    lab.job(at(9, 20), types=["H100"], state=Job.State.PENDING, accelerators=4, workers=2, time_limit=7200)
    lab.job(at(9, 20), state=Job.State.REQUEUED, milli=500, time_limit=3600, attempts=[(at(9, 21), at(9, 22), "A100")])
    lab.job(at(9, 20), types=["H100"], state=Job.State.RUNNING, attempts=[(at(9, 21), None, "H100")])
    assert per_flavor(backlog_hours(lab.org)) == pytest.approx({"H100": 16.0, "A100": 0.5})
    Node.objects.create(
        cluster=lab.cluster, name="gone", accelerator=lab.flavors["H100"], accelerators=8, present=False
    )
    assert fleet(lab.org) == {"H100": 16, "A100": 4}


def test_the_history_fills_days_carries_capacity_and_spreads_to_the_default_flavor(lab: Lab):
    lab.capacity(date(2025, 3, 2), 86_400)  # H100 starts here: 192 accelerator-hours, carried over the gap
    lab.capacity(date(2025, 3, 5), 43_200)
    lab.usage(date(2025, 3, 4), 3600, 2000)
    lab.job(at(5, 8), types=["H100"], accelerators=4, attempts=[(at(5, 10), at(5, 11), "H100")])
    lab.job(at(9, 20), state=Job.State.PENDING, time_limit=7200)  # names no flavor: H100, the largest fleet
    lab.job(at(6, 0), types=["A100"], state=Job.State.CANCELLED, finished=at(6, 3))
    found = {h.flavor: h for h in read_history(lab.org, NOW)}
    assert set(found) == {"A100", "H100"}
    h100 = found["H100"]
    assert h100.days == [date(2025, 3, d) for d in range(2, 10)]  # to yesterday
    assert h100.used == pytest.approx([0, 0, 2.0, 0, 0, 0, 0, 0])
    assert h100.queued == pytest.approx([0, 0, 0, 8.0, 0, 0, 0, 4.0])
    assert h100.demand == pytest.approx([0, 0, 2.0, 8.0, 0, 0, 0, 4.0])
    assert h100.capacity == pytest.approx([192.0, 192.0, 192.0, 96.0, 96.0, 96.0, 96.0, 96.0])
    assert h100.accelerators == 16
    assert h100.backlog == pytest.approx(2.0)
    a100 = found["A100"]
    assert a100.days == [date(2025, 3, d) for d in range(6, 10)]
    assert a100.queued == pytest.approx([3.0, 0, 0, 0])
    assert a100.capacity == [None] * 4
    assert a100.accelerators == 4


def test_an_organizations_forecast_has_every_flavor_and_is_cached(lab: Lab, django_assert_max_num_queries: Any):
    lab.history(70, NOW.date())
    result = forecast_organization(lab.org, "12w", NOW)
    assert [f.flavor for f in result.flavors] == ["A100", "H100"]
    h100 = result.flavors[1]
    assert h100.message == ""
    assert len(h100.forecast) == 84
    assert h100.forecast[0].start == date(2025, 3, 10)
    assert h100.backtest.origins == 50  # from day 14 to the last with a whole week after it
    four = h100.backtest.score(4)
    assert four is not None
    assert four.wape is not None
    assert [t.team for t in h100.teams] == ["Vision"]
    assert result.flavors[0].message == "not enough history (0 days; needs 14)"
    with django_assert_max_num_queries(0):
        assert forecast_organization(lab.org, "12w", NOW) == result
    assert forecast_organization(lab.org, "6m", NOW).flavors[1].period == "week"
    assert forecast_history.CACHE_SECONDS == 300


def test_finance_and_admins_read_forecasts_of_their_own_organization_only(world: World):
    users = world.users
    assert forecast_history.planning_organizations(users["fiona"]) == [world.org]
    assert forecast_history.planning_organizations(users["adam"]) == [world.org]
    assert forecast_history.planning_organizations(users["mallory"]) == [world.other_org]
    for name in ("alice", "bob", "lena", "trent"):
        assert forecast_history.planning_organizations(users[name]) == []
