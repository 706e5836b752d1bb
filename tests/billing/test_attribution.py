"""Cost attribution: the allocation rule, cents that add up to the fleet's total exactly, and the month read
from metered records on the database."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing import attribution
from billing.actions import metering, prices
from billing.actions.prices import RateBook
from billing.attribution import Names, apportion
from billing.models import Overhead
from clusters.capacity import CapacityType
from clusters.models import Node
from scheduler.models import Assignment
from tests.billing.conftest import placed
from tests.scheduler.conftest import Fleet

NOV = date(2026, 11, 1)
HOUR = 3_600_000  # thousandth-accelerator-seconds in an accelerator-hour
POOL = (1, 10, CapacityType.ON_PREM)


def use(
    team: int, hours: float, day: date = NOV, pool: tuple[int, int, str] = POOL, user: int | None = None
) -> dict[str, Any]:
    return {
        "day": day,
        "team_id": team,
        "project_id": None,
        "user_id": user or team,
        "cluster_id": pool[0],
        "flavor_id": pool[1],
        "capacity_type": pool[2],
        "ms": int(hours * HOUR),
    }


def present(accelerator_hours: float, day: date = NOV, pool: tuple[int, int, str] = POOL) -> dict[str, Any]:
    # Capacity rows sum seconds x accelerators (whole ones); the allocation multiplies by 1000.
    return {
        "day": day,
        "cluster_id": pool[0],
        "flavor_id": pool[1],
        "capacity_type": pool[2],
        "ms": int(accelerator_hours * 3600),
    }


def allocate(
    usage: list[dict[str, Any]], capacity: list[dict[str, Any]], rates: list[tuple[Any, ...]], overhead: str = "0"
) -> attribution.Attribution:
    return attribution._allocate(1, NOV, RateBook(rates), usage, capacity, Decimal(overhead), Names())


def by_team(result: attribution.Attribution) -> dict[int, tuple[int, int, int]]:
    return {row["team"]: (row["usage"], row["idle"], row["overhead"]) for row in result.rollup(["team"])}


def balanced(result: attribution.Attribution) -> bool:
    allocated = sum(line.total for line in result.lines)
    return allocated + result.unallocated_idle + result.unallocated_overhead == result.fleet_total


def test_idle_goes_to_a_pools_users_by_hours_and_overhead_to_everyone_by_cost() -> None:
    # 8 accelerators all day at 2.00: 384.00. Team 1 used 48 hours (96.00), team 2 16 hours (32.00).
    result = allocate([use(1, 48), use(2, 16)], [present(8 * 24)], [(*POOL, NOV, Decimal(2))], overhead="100")
    assert by_team(result) == {1: (9600, 19200, 7500), 2: (3200, 6400, 2500)}
    assert result.fleet_total == 38400 + 10000
    assert balanced(result)
    (pool,) = result.pools
    assert (pool.cost, pool.used, pool.idle) == (38400, 12800, 25600)
    assert pool.utilisation == pytest.approx(1 / 3)


def test_a_pool_nobody_used_is_paid_for_by_everyone_in_proportion_to_usage_cost() -> None:
    busy, empty = (1, 10, CapacityType.ON_PREM), (2, 10, CapacityType.SPOT)
    rates = [(*busy, NOV, Decimal(1)), (*empty, NOV, Decimal("0.5"))]
    # Team 1 spent 30.00, team 2 10.00 on the busy pool (which had no idle); the empty pool's 12.00 is split 3:1.
    result = allocate(
        [use(1, 30, pool=busy), use(2, 10, pool=busy)], [present(40, pool=busy), present(24, pool=empty)], rates
    )
    assert by_team(result) == {1: (3000, 900, 0), 2: (1000, 300, 0)}
    assert balanced(result)


def test_with_no_usage_at_all_idle_and_overhead_stay_unallocated_but_counted() -> None:
    result = allocate([], [present(10)], [(*POOL, NOV, Decimal("1.5"))], overhead="20.5")
    assert result.lines == []
    assert (result.unallocated_idle, result.unallocated_overhead, result.fleet_total) == (1500, 2050, 3550)
    assert balanced(result)


def test_each_day_is_priced_at_the_rate_in_effect_that_day() -> None:
    second = NOV + timedelta(days=1)
    rates = [(*POOL, date(2026, 10, 1), Decimal(1)), (*POOL, second, Decimal(3))]
    result = allocate([use(1, 10), use(1, 10, day=second)], [present(10), present(10, day=second)], rates)
    assert by_team(result) == {1: (1000 + 3000, 0, 0)}
    assert [(row["day"], row["usage"]) for row in sorted(result.rollup(["day"]), key=lambda r: r["day"])] == [
        (NOV, 1000),
        (second, 3000),
    ]


def test_usage_without_a_price_costs_nothing_and_is_reported_as_unpriced() -> None:
    result = allocate([use(1, 5)], [present(5)], [])
    assert by_team(result) == {1: (0, 0, 0)}
    assert result.unpriced_milli_seconds == 5 * HOUR
    assert not result.pools[0].priced


def test_more_used_than_the_meter_saw_present_costs_what_was_used() -> None:
    # Capacity sampled late on a node's first day: used 10 hours, 6 seen present. No negative idle.
    result = allocate([use(1, 10)], [present(6)], [(*POOL, NOV, Decimal(1))])
    assert by_team(result) == {1: (1000, 0, 0)}
    assert result.fleet_total == 1000


def test_thirds_round_down_per_team_and_the_cent_left_stays_unallocated_so_they_add_up() -> None:
    result = allocate([use(1, 1), use(2, 1), use(3, 1)], [present(4)], [(*POOL, NOV, Decimal(1))], overhead="1")
    rows = by_team(result)
    assert sorted(idle for _, idle, _ in rows.values()) == [33, 33, 33]
    assert sorted(overhead for _, _, overhead in rows.values()) == [33, 33, 33]
    assert (result.unallocated_idle, result.unallocated_overhead) == (1, 1)
    assert balanced(result)


@settings(max_examples=150, deadline=None)
@given(
    usage=st.lists(
        st.tuples(st.integers(1, 5), st.integers(0, 3), st.integers(0, 2), st.integers(1, 10**9)), max_size=25
    ),
    capacity=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 10**8)), max_size=8),
    rates=st.lists(st.decimals(min_value=0, max_value=50, places=6), min_size=4, max_size=4),
    overhead=st.decimals(min_value=0, max_value=10**6, places=2),
)
def test_every_allocation_adds_up_to_the_fleet_total_to_the_cent(
    usage: list[tuple[int, int, int, int]],
    capacity: list[tuple[int, int, int]],
    rates: list[Decimal],
    overhead: Decimal,
) -> None:
    """Teams, pools and days at random, some pools unpriced: allocated + unallocated = fleet total, exactly,
    and no line's idle or overhead is negative."""
    pools = [(c, 10, CapacityType.ON_PREM) for c in range(4)]
    book = [(*pools[i], NOV, rate) for i, rate in enumerate(rates[:3])]  # pool 3 has no price
    usage_rows = [
        {**use(team, 0, day=NOV + timedelta(days=day), pool=pools[pool]), "ms": ms} for team, pool, day, ms in usage
    ]
    capacity_rows = [
        {**present(0, day=NOV + timedelta(days=day), pool=pools[pool]), "ms": s} for pool, day, s in capacity
    ]
    result = allocate(usage_rows, capacity_rows, book, overhead=str(overhead))
    assert balanced(result)
    assert all(line.idle >= 0 and line.overhead >= 0 and line.usage >= 0 for line in result.lines)
    assert result.fleet_total == result.capacity_cost + result.overhead
    team_rows = result.rollup(["team"])
    assert sum(r["total"] for r in team_rows) == sum(line.total for line in result.lines)


@settings(max_examples=120, deadline=None)
@given(
    usage=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 2), st.integers(0, 3), st.integers(1, 10**9)), max_size=16
    ),
    capacity=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 10**8)), max_size=8),
    rates=st.lists(st.decimals(min_value=0, max_value=50, places=6), min_size=3, max_size=3),
    overhead=st.decimals(min_value=0, max_value=10**6, places=2),
)
def test_a_teams_month_to_date_charge_never_falls_while_the_month_runs(
    usage: list[tuple[int, int, int, int]],
    capacity: list[tuple[int, int, int]],
    rates: list[Decimal],
    overhead: Decimal,
) -> None:
    """The month read as it runs: each day metered half, then whole, then over (its idle and overhead shared), and at
    last the month over. No team's usage, idle share, overhead share or total ever falls, whoever else uses more;
    no overhead is charged for days not over; and it all still adds up to the fleet's total."""
    pools = [(c, 10, CapacityType.ON_PREM) for c in range(3)]
    book = RateBook([(*pools[i], NOV, rate) for i, rate in enumerate(rates)])

    def seen(day: int, ms: int, today: int, part: int) -> int:
        return ms if day < today else ms * part // 2 if day == today else 0

    before: dict[int, tuple[int, int, int]] = {}
    steps = [(today, part, NOV + timedelta(days=today)) for today in range(5) for part in (1, 2)]
    for today, part, done in [*steps, (4, 2, None)]:
        rows = [
            {**use(team, 0, day=NOV + timedelta(days=day), pool=pools[pool]), "ms": seen(day, ms, today, part)}
            for team, pool, day, ms in usage
            if day <= today
        ]
        present_rows = [
            {**present(0, day=NOV + timedelta(days=day), pool=pools[pool]), "ms": seen(day, s, today, part)}
            for pool, day, s in capacity
            if day <= today
        ]
        result = attribution._allocate(1, NOV, book, rows, present_rows, overhead, Names(), done=done)
        assert balanced(result)
        assert result.unallocated_idle >= 0
        assert result.unallocated_overhead >= 0
        days_over = 30 if done is None else today
        assert result.overhead == attribution.to_cents(overhead * days_over / 30)
        now = by_team(result)
        for team, figures in before.items():
            assert all(n >= b for n, b in zip(now[team], figures, strict=True)), (team, figures, now[team], done)
        before = now


@given(st.lists(st.decimals(min_value=0, max_value=1000, places=5), max_size=30), st.integers(-2, 2))
def test_apportion_hits_its_total_and_moves_each_amount_by_less_than_a_cent_and_a_bit(
    amounts: list[Decimal], nudge: int
) -> None:
    exact = sum(amounts, Decimal(0))
    total = attribution.to_cents(exact) + (nudge if amounts else 0)
    cents = apportion(amounts, total)
    assert sum(cents) == (total if amounts else 0)
    assert all(abs(c - a * 100) < 1 + abs(nudge) for c, a in zip(cents, amounts, strict=True))


# ------------------------------------------------------------------------------------- from the database


def price_everything(fleet: Fleet, rate: str) -> None:
    """One on-prem price per flavor of the fleet's clusters, from before November, set by finance."""
    for cluster in fleet.clusters.values():
        flavors = Node.objects.filter(cluster=cluster, accelerator__isnull=False).values_list(
            "accelerator__name", flat=True
        )
        for flavor in set(flavors):
            row = {"cluster": cluster.slug, "flavor": flavor, "capacity_type": "on_demand", "hourly_rate": rate}
            prices.set_price(fleet.user("fiona"), fleet.org, {**row, "effective_from": "2026-10-01"})
    # The simulated clusters are on-prem; price them as on-demand by saying so in their options.
    for cluster in fleet.clusters.values():
        cluster.options = {**cluster.options, "capacity_type": "on_demand"}
        cluster.save(update_fields=["options"])


def test_a_metered_month_is_attributed_to_the_teams_and_adds_up_to_the_fleet_on_the_database(fleet: Fleet) -> None:
    price_everything(fleet, "2.5")
    start = datetime(2026, 11, 3, 9, tzinfo=UTC)
    vision = placed(fleet, admitted=start, ended=start + timedelta(hours=10), accelerators=4)
    robotics = placed(fleet, username="bob", admitted=start, ended=start + timedelta(hours=5), accelerators=2, name="b")
    Overhead.objects.create(
        organization=fleet.org, name="Support", amount=Decimal("1000.00"), starts=date(2026, 1, 1), updated_at=start
    )
    metering.meter_capacity(fleet.org, start)
    metering.meter(fleet.org, start + timedelta(days=1))
    assert metering.reconcile(fleet.org, since=start - timedelta(days=1)).balanced

    month = attribution.attribute(fleet.org, NOV)
    teams = {row["team_name"]: row for row in month.rollup(["team"])}
    assert teams["Vision"]["usage"] == 4 * 10 * 250
    assert teams["Robotics"]["usage"] == 2 * 5 * 250
    assert sum(row["total"] for row in teams.values()) == month.fleet_total
    assert month.overhead == 100000
    nodes = Node.objects.filter(cluster__in=fleet.clusters.values(), accelerators__gt=0)
    present_hours = sum(n.accelerators for n in nodes) * 24  # metered from 09:00 one day to 09:00 the next
    assert month.capacity_cost == present_hours * 250
    # Idle split by accelerator-hours used in each pool; the job list prices the same hours.
    jobs = {job.job: job for job in attribution.job_costs(fleet.org.pk, NOV)}
    assert (jobs[vision.job_id].cost, jobs[robotics.job_id].cost) == (10000, 2500)
    assert [j.job for j in attribution.job_costs(fleet.org.pk, NOV, limit=1)] == [vision.job_id]
    assert Assignment.objects.filter(attempt=vision).exists()


def test_a_researcher_is_shown_only_their_teams_lines(fleet: Fleet) -> None:
    price_everything(fleet, "1")
    start = datetime(2026, 11, 3, 9, tzinfo=UTC)
    placed(fleet, admitted=start, ended=start + timedelta(hours=1), accelerators=1)
    placed(fleet, username="bob", admitted=start, ended=start + timedelta(hours=1), accelerators=1, name="b")
    metering.meter(fleet.org, start + timedelta(hours=2))
    month = attribution.attribute(fleet.org, NOV)

    mine = attribution.visible_to(fleet.user("alice"), month)
    assert {row["team_name"] for row in mine.rollup(["team"])} == {"Vision"}
    assert not mine.fleet_visible
    everything = attribution.visible_to(fleet.user("fiona"), month)
    assert {row["team_name"] for row in everything.rollup(["team"])} == {"Vision", "Robotics"}
    assert everything.fleet_visible
    outsider = attribution.visible_to(fleet.world.users["mallory"], month)
    assert outsider.lines == []
    assert attribution.job_costs(fleet.org.pk, NOV, teams=[]) == []


# ----------------------------------------------------------------------------------------------- reservations


def reserving(
    usage: list[dict[str, Any]],
    capacity: list[dict[str, Any]],
    rates: list[tuple[Any, ...]],
    reserved: dict[tuple[int, Any, date], tuple[int, int]],
) -> attribution.Attribution:
    return attribution._allocate(1, NOV, RateBook(rates), usage, capacity, Decimal(0), Names(), None, reserved)


def test_a_teams_reservation_is_billed_whether_used_or_not() -> None:
    # 8 accelerators all day at 2.00: 384.00. Team 1 used 48 hours; team 3 booked 64 accelerator-hours (asked by
    # user 30) and used 16 of them: its 48 unfilled hours (96.00) are its own, out of the pool's idle (256.00); the
    # rest of the idle (160.00) goes to the pool's users by hours, 3:1.
    rates = [(*POOL, NOV, Decimal(2))]
    reserved = {(3, POOL, NOV): (64 * HOUR, 30)}
    result = reserving([use(1, 48), use(3, 16)], [present(8 * 24)], rates, reserved)
    assert by_team(result) == {1: (9600, 12000, 0), 3: (3200, 9600 + 4000, 0)}
    (booked,) = [line for line in result.lines if line.user == 30]
    assert (booked.team, booked.milli_seconds, booked.usage, booked.idle) == (3, 0, 0, 9600)
    assert balanced(result)
    # Had team 3 used all it booked, it would pay only its usage and its share of the idle.
    full = reserving([use(1, 48), use(3, 64)], [present(8 * 24)], rates, reserved)
    assert [line.idle for line in full.lines if line.user == 30] == [0]
    assert balanced(full)


def test_reservations_never_take_more_than_the_pool_was_idle() -> None:
    # Two teams booked 20 hours each of a pool idle for only 10: each pays for 5, nothing is left for the users.
    rates = [(*POOL, NOV, Decimal(1))]
    reserved = {(3, POOL, NOV): (20 * HOUR, 30), (4, POOL, NOV): (20 * HOUR, 40)}
    result = reserving([use(1, 14)], [present(24)], rates, reserved)
    assert by_team(result) == {1: (1400, 0, 0), 3: (0, 500, 0), 4: (0, 500, 0)}
    assert balanced(result)


@settings(max_examples=60, deadline=None)
@given(
    usage=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 1), st.integers(0, 3), st.integers(0, 40 * HOUR))),
    capacity=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3), st.integers(0, 30 * 3600))),
    reserved=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 1), st.integers(0, 3), st.integers(0, 30 * HOUR))),
)
def test_reservations_move_idle_cost_and_every_cent_still_adds_up(
    usage: list[tuple[int, int, int, int]],
    capacity: list[tuple[int, int, int]],
    reserved: list[tuple[int, int, int, int]],
) -> None:
    pools = [(c, 10, CapacityType.ON_PREM) for c in range(2)]
    book = [(*pools[0], NOV, Decimal("1.37")), (*pools[1], NOV, Decimal("2.5"))]
    usage_rows = [
        {**use(team, 0, day=NOV + timedelta(days=day), pool=pools[pool]), "ms": ms} for team, pool, day, ms in usage
    ]
    capacity_rows = [
        {**present(0, day=NOV + timedelta(days=day), pool=pools[pool]), "ms": s} for pool, day, s in capacity
    ]
    booked: dict[tuple[int, Any, date], tuple[int, int]] = {}
    for team, pool, day, held in reserved:
        booked[(team, pools[pool], NOV + timedelta(days=day))] = (held, 100 + team)
    without = reserving(usage_rows, capacity_rows, book, {})
    result = reserving(usage_rows, capacity_rows, book, booked)
    assert balanced(result)
    assert result.fleet_total == without.fleet_total  # the bill is moved between teams, never grown
    assert all(line.idle >= 0 and line.usage >= 0 for line in result.lines)
    assert sum(line.usage for line in result.lines) == sum(line.usage for line in without.lines)
