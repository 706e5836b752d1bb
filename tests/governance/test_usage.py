"""Quota usage as the quota pages show it (``governance/usage.py``, made by ``scheduler/governed.py``): per queue,
flavor and resource, the quota beside what is used, borrowed, lent and asked for, with exact numbers from real
placements; the lending rule and the pending-demand rule on hand-made engine trees; and the query count, which
does not grow with the number of rows."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from governance import usage
from governance.actions import quotas
from governance.models import Cohort, Queue
from scheduler import actions, governed
from scheduler.engine import model as m
from scheduler.engine.quota import QuotaTree
from scheduler.placement import feasibility
from tests.clusters.factories import simulated_cluster
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db

H100, A100 = "H100-SXM-80GB", "A100-SXM-40GB"
GIB = 1024


def team_queue(fleet: Fleet, team: str) -> Queue:
    return actions.queue_for(fleet.world.teams[team], None)


def give(fleet: Fleet, owner: Queue | Cohort, flavor: str, nominal: Any, **limits: Any) -> None:
    quotas.set_quota(fleet.user("adam"), owner, flavor=flavor, nominal=nominal, reason="plan", **limits)


def values(row: usage.Row) -> tuple[Any, ...]:
    return (row.nominal, row.own, row.used, row.borrowed, row.lent, row.pending)


def plain(*items: Any) -> tuple[Any, ...]:
    """The items as a tuple to compare with numbers (Decimal equals int; mypy would call them unrelated)."""
    return items


@pytest.fixture
def pool(fleet: Fleet, tmp_path: Path) -> Fleet:
    """Vision, Robotics and Language in one cohort, with H100 quotas 16, 8 and 8 (the fleet has 48 H100 and,
    on a second kind of cluster, 16 A100). Vision runs 4 H100; Robotics runs 12, borrowing 4."""
    simulated_cluster(fleet.org, "a100", tmp_path, profile="a100-slurm", nodes=2, job_seconds=3600)
    adam = fleet.user("adam")
    research = quotas.create_cohort(adam, fleet.org, name="research", reason="one pool")
    for team, nominal in (("vision", 16), ("robotics", 8), ("language", 8)):
        quotas.set_policy(adam, team_queue(fleet, team), reason="join", cohort=research)
        give(fleet, team_queue(fleet, team), H100, nominal)
    quotas.set_policy(adam, team_queue(fleet, "vision"), reason="H100 first", flavor_order=[H100, A100])
    fleet.submit("alice", name="v-run", accelerator_types=[H100], accelerators=4, cpu=8000, memory=64 * GIB)
    for i in range(3):
        fleet.submit("bob", name=f"r-run-{i}", accelerator_types=[H100], accelerators=4, cpu=2000, memory=8 * GIB)
    fleet.cycle()
    assert sorted(queue for (queue,) in Queue.objects.filter(jobs__state="placing").values_list("name")) == [
        "robotics",
        "robotics",
        "robotics",
        "vision",
    ]
    return fleet


def rows_by_key(rows: list[usage.Row]) -> dict[tuple[str, str, str], usage.Row]:
    return {(row.queue, row.flavor, row.resource): row for row in rows}


def test_used_borrowed_and_lent_follow_the_engines_tree(pool: Fleet) -> None:
    rows = rows_by_key(governed.organization_usage(pool.org).rows)
    # Robotics holds 12 of its 8; the 4 it borrows come from the idle quota of the others in the cohort,
    # Vision's 12 idle and Language's 8 idle, in proportion: 12/20 and 8/20 of 4.
    assert values(rows[("robotics", H100, "accelerator")]) == (8, 8, 12, 4, 0, 0)
    assert values(rows[("vision", H100, "accelerator")]) == (16, 16, 4, 0, Decimal("2.4"), 0)
    assert values(rows[("language", H100, "accelerator")]) == (8, 8, 0, 0, Decimal("1.6"), 0)
    assert rows[("vision", H100, "accelerator")].percent == 25
    assert rows[("robotics", H100, "accelerator")].within == 8
    # CPU and memory are not rationed by any quota: no rows for them.
    assert {resource for (_, _, resource) in rows} == {"accelerator"}


def test_a_lending_limit_keeps_the_rest_of_the_quota_home(pool: Fleet) -> None:
    give(pool, team_queue(pool, "vision"), H100, 16, lending_limit=2)
    rows = rows_by_key(governed.organization_usage(pool.org).rows)
    # Vision lends at most 2; Language's 8 and those 2 cover Robotics' 4 in proportion (2/10 and 8/10).
    assert rows[("vision", H100, "accelerator")].lent == Decimal("0.8")
    assert rows[("language", H100, "accelerator")].lent == Decimal("3.2")
    assert rows[("vision", H100, "accelerator")].lending_limit == 2


def test_pending_demand_counts_each_waiting_job_under_one_flavor(pool: Fleet) -> None:
    # After the cycle, so they stay waiting: the first flavor the job names that the queue may use, the
    # queue's first flavor (H100 in Vision's fallback order) for a job naming none, and fractions.
    pool.submit("alice", name="p-a100", accelerator_types=[A100, H100], accelerators=4, workers=2)
    pool.submit("alice", name="p-any", accelerators=1, accelerator_milli=250)
    pool.submit("alice", name="p-cpu", accelerators=0, cpu=4000, workers=3)
    pool.submit("bob", name="p-h100", accelerator_types=[H100], accelerators=8)
    rows = rows_by_key(governed.organization_usage(pool.org).rows)
    assert rows[("vision", A100, "accelerator")].pending == 8
    assert rows[("vision", H100, "accelerator")].pending == Decimal("0.25")
    assert rows[("robotics", H100, "accelerator")].pending == 8
    # A100 is offered but nobody rations it: nothing is borrowed there, and there is no nominal.
    a100 = rows[("vision", A100, "accelerator")]
    assert plain(a100.nominal, a100.own, a100.used, a100.borrowed, a100.governed) == (None, None, 0, 0, False)


def test_cpu_and_memory_rows_appear_where_a_quota_rations_them(pool: Fleet) -> None:
    quotas.set_quota(
        pool.user("adam"), team_queue(pool, "vision"), flavor=H100, resource="cpu", nominal=6, reason="cores"
    )
    rows = rows_by_key(governed.organization_usage(pool.org).rows)
    # Governed now: Vision's 8 cores against 6 (2 borrowed), Robotics' 3 x 2 cores against none.
    assert values(rows[("vision", H100, "cpu")]) == (6, 6, 8, 2, 0, 0)
    assert values(rows[("robotics", H100, "cpu")]) == (None, 0, 6, 6, 0, 0)
    assert ("vision", H100, "memory") not in rows


def test_a_split_team_keeps_its_own_share_and_the_cohort_tree_adds_up(pool: Fleet) -> None:
    vision = team_queue(pool, "vision")
    project = pool.world.project("vision")
    detection = quotas.project_queue(pool.user("lena"), project, reason="own share")
    quotas.set_quota(pool.user("lena"), detection, flavor=H100, nominal=10, reason="own share")
    result = governed.organization_usage(pool.org)
    rows = rows_by_key(result.of_team(pool.world.teams["vision"].pk))
    # The team's queue shows the team's quota (16) and keeps, as its own, what the project was not given.
    team_row = rows[("vision", H100, "accelerator")]
    assert plain(team_row.nominal, team_row.own, team_row.used, team_row.borrowed) == (16, 6, 4, 0)
    assert values(rows[(detection.name, H100, "accelerator")])[:4] == (10, 10, 0, 0)
    assert [row.queue for row in result.of_queue(vision.pk)] == ["vision"]
    # The cohort: 32 pooled, 16 used below it, nothing borrowed from above (it is the root).
    (research,) = result.cohorts
    assert research.name == "research"
    assert sorted(research.queues) == ["language", "robotics", "vision"]
    (row,) = research.rows
    assert plain(row.flavor, row.pool, row.used, row.borrowed, row.lent) == (H100, 32, 16, 0, 0)
    # The team's 12 idle (2 of its own, 10 of the project's) lend 12/20 of Robotics' 4, as before the split.
    lent = rows[("vision", H100, "accelerator")].lent + rows[(detection.name, H100, "accelerator")].lent
    assert lent == Decimal("2.4")


def test_queries_do_not_grow_with_rows(pool: Fleet) -> None:
    feasibility.forget(pool.org)  # read afresh each time, not from the snapshot kept for 10 s
    with CaptureQueriesContext(connection) as few:
        governed.organization_usage(pool.org)
    for i in range(6):
        pool.submit("alice", name=f"more-{i}", accelerator_types=[A100], accelerators=1)
    give(pool, team_queue(pool, "vision"), A100, 4)
    give(pool, team_queue(pool, "robotics"), A100, 4)
    feasibility.forget(pool.org)
    with CaptureQueriesContext(connection) as more:
        rows = governed.organization_usage(pool.org).rows
    assert len(rows) > 4
    # A fixed number of reads of the fleet, governance and jobs (the snapshot's maintenance windows and their
    # nodes, exclusions, checkpoint clusters, arrays' limits, the fair-share setting, the queues' recent use, the
    # approved capacity requests and the elastic pools among them), whatever the number of rows.
    queries = [q["sql"][:80] for q in more.captured_queries]
    assert len(more.captured_queries) == len(few.captured_queries) <= 27, queries


# ------------------------------------------------------------------------------- the rules on engine trees


def tree_of(cohorts: list[m.Cohort], queues: list[m.Queue], used: dict[str, int]) -> QuotaTree:
    snap = m.Snapshot(
        now=0.0,
        clusters=(),
        nodes=(
            m.Node(
                name="n",
                cluster="c",
                flavor="gpu",
                accel_free=(1000,),
                cpu_free=1,
                memory_free=1,
                cpu_capacity=1,
                memory_capacity=1,
            ),
        ),
        tiers=(),
        cohorts=tuple(cohorts),
        queues=tuple(queues),
        running=(),
        pending=(),
        config=m.Config(),
    )
    return governed.charged_tree(snap, {(queue, "gpu"): [amount, 0, 0] for queue, amount in used.items()})


def quota(nominal: int, borrow: int | None = None, lend: int | None = None) -> m.Quotas:
    return {("gpu", "accelerator"): m.Quota(nominal, borrow, lend)}


def test_lending_is_shared_down_a_two_level_tree() -> None:
    # root: [left: a (10), b (10, lends at most 4)], [right: c (6)] with c using 14 (8 borrowed) and a 2.
    tree = tree_of(
        [m.Cohort("root"), m.Cohort("left", "root"), m.Cohort("right", "root")],
        [m.Queue("a", "left", quota(10)), m.Queue("b", "left", quota(10, lend=4)), m.Queue("c", "right", quota(6))],
        {"a": 2, "c": 14},
    )
    lent = governed.lent(tree)
    fr = tree.fr("gpu", 0)
    # left has 8 idle of a's and 4 of b's; right's c borrows 8 through root, all from left, shared 8:4.
    assert lent[(tree.index["left"], fr)] == 8
    assert lent[(tree.index["a"], fr)] == Fraction(16, 3)
    assert lent[(tree.index["b"], fr)] == Fraction(8, 3)
    assert (tree.index["c"], fr) not in lent


def test_a_cohorts_own_quota_lends_beside_its_members_in_proportion() -> None:
    tree = tree_of(
        [m.Cohort("pool", None, quota(6))], [m.Queue("a", "pool", quota(2)), m.Queue("b", "pool", quota(4))], {"b": 7}
    )
    lent = governed.lent(tree)
    fr = tree.fr("gpu", 0)
    # b borrows 3 of the 8 idle (the cohort's own 6 and a's 2): a lends 2 x 3/8.
    assert lent[(tree.index["a"], fr)] == Fraction(3, 4)


def test_pending_demand_rule() -> None:
    queue = m.Queue("q", None, {}, flavors=("h100", "a100"))
    jobs = [
        m.Job("1", "q", "t", 0, workers=2, accelerators=4, flavors=("v5p", "a100", "h100"), cpu=1000, memory=2048),
        m.Job("2", "q", "t", 0, accelerators=1, accel_milli=500, flavors=(), cpu=3000, memory=1024),
        m.Job("3", "q", "t", 0, accelerators=2, flavors=("v5p",), cpu=1000, memory=1024),
    ]
    snap = m.Snapshot(
        now=0.0,
        clusters=(),
        nodes=(),
        tiers=(),
        cohorts=(),
        queues=(queue,),
        running=(),
        pending=tuple(jobs),
        config=m.Config(),
    )
    demand = governed.pending_demand(snap)
    assert demand == {
        ("q", "a100", "accelerator"): 8000,
        ("q", "a100", "cpu"): 2000,
        ("q", "a100", "memory"): 4096,
        ("q", "h100", "accelerator"): 500,
        ("q", "h100", "cpu"): 3000,
        ("q", "h100", "memory"): 1024,
        ("q", "v5p", "accelerator"): 2000,
        ("q", "v5p", "cpu"): 1000,
        ("q", "v5p", "memory"): 1024,
    }
    assert usage.people(500, "accelerator") == Decimal("0.5")
    assert usage.people(1536, "memory") == Decimal("1.5")
