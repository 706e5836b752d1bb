"""What elastic pools are asked for (docs/scheduling.md §Elastic pools): only for work that waits for capacity, never
for quota; packed onto as few nodes as hold it, within the pool's room and what its budget has left; the cheapest
pool the job may use, spot only for work that accepts it; and the waiting job told so, with when the nodes would be
up. A pool's budget also bounds how long new work may run on the nodes it has (their horizons)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine import schedule
from scheduler.engine.elastic import WANTING, horizons
from scheduler.engine.model import Elastic, PendingReason, Snapshot
from tests.engine.invariants import check
from tests.engine.strategies import snapshots

from .test_phases import NOW, admitted, job, node, queue, reasons, running, snapshot
from .test_properties import PROPERTY

CLOUD = Elastic("cloud-h100", "c1", "h100", 8, 96_000, 1_000_000, 3.0, 600.0, most=4)


def full(*jobs: object, quota: int = 64, pools: tuple[Elastic, ...] = (CLOUD,)) -> Snapshot:
    """One 8-GPU node busy with another queue's work for 50 more minutes, ``jobs`` waiting in queue a, the pools."""
    queues = (queue("a", quota=quota), queue("z", quota=8))
    s = snapshot((node("n1", free=0),), queues, jobs, (running("w", "n1", queue="z", tier="urgent"),))  # type: ignore[arg-type]
    return replace(s, elastic=pools)


def test_work_waiting_for_capacity_asks_for_as_few_nodes_as_hold_it() -> None:
    jobs = [job(f"j{i}", accelerators=4, at=i) for i in range(3)]
    d = schedule(full(*jobs))
    (want,) = d.wanted
    assert (want.pool, want.cluster, want.flavor, want.nodes) == ("cloud-h100", "c1", "h100", 2)  # 3 x 4 on 8-GPU nodes
    assert want.jobs == ("j0", "j1", "j2")
    assert want.cost_per_hour == 2 * 8 * 3.0
    assert want.up_at == NOW + 600
    p = next(p for p in d.pending if p.job == "j0")
    assert p.reason is PendingReason.RESERVED  # for when the running work ends, later than the new nodes
    assert "Capacity is being added for it: 2 more h100 nodes of cloud-h100 on c1, up in about 10 min." in p.message
    assert p.estimated_start == NOW + 600


def test_work_waiting_for_quota_asks_for_nothing_and_quota_counts_as_jobs_are_packed() -> None:
    # quota of 12: either 8-GPU job fits alone, not both; and a 16-GPU job never does
    jobs = (job("a", accelerators=8), job("b", accelerators=8, at=1), job("big", accelerators=8, workers=2, at=2))
    d = schedule(full(*jobs, quota=12))
    (want,) = d.wanted
    assert want.jobs == ("a",)
    assert reasons(d)["big"] is not PendingReason.CAPACITY


def test_the_pools_room_bounds_what_is_asked_and_a_gang_too_big_for_it_waits_as_it_was() -> None:
    small = replace(CLOUD, most=1)
    d = schedule(full(job("gang", accelerators=8, workers=2), job("one", accelerators=8, at=1), pools=(small,)))
    (want,) = d.wanted
    assert (want.nodes, want.jobs) == (1, ("one",))
    gang = next(p for p in d.pending if p.job == "gang")
    assert "Capacity is being added" not in gang.message


def test_the_cheapest_pool_the_job_may_use_and_spot_only_for_work_that_accepts_it() -> None:
    spot = replace(CLOUD, name="cloud-spot", price_per_accel_hour=1.0, spot=True)
    d = schedule(
        full(job("plain", accelerators=8), job("thrifty", accelerators=8, spot=True, at=1), pools=(CLOUD, spot))
    )
    assert {w.pool: w.jobs for w in d.wanted} == {"cloud-h100": ("plain",), "cloud-spot": ("thrifty",)}
    # a price limit below the pool's price: nothing to ask
    d = schedule(full(job("capped", accelerators=8, max_price_per_hour=10.0)))
    assert d.wanted == ()


def test_a_slice_shaped_pool_is_asked_only_for_jobs_of_its_shape() -> None:
    slices = replace(CLOUD, name="tpu-burst", shape="v5p-32/2x2x4")
    jobs = (
        job("any-topology", accelerators=8, shape="v5p-32"),
        job("this-topology", accelerators=8, shape="v5p-32/2x2x4", at=1),
        job("other-topology", accelerators=8, shape="v5p-32/4x4x1", at=2),
        job("other-type", accelerators=8, shape="v5p-64", at=3),
        job("no-shape", accelerators=8, at=4),
    )
    queues = (queue("a", quota=64), queue("z", quota=16))
    busy = (running("w", "n1", queue="z", tier="urgent"), running("v", "s1", queue="z", tier="urgent"))
    fleet = (node("n1", free=0), replace(node("s1", free=0), shape="v5p-32/2x2x4"))
    shaped = replace(snapshot(fleet, queues, jobs, busy), elastic=(slices,))
    (want,) = schedule(shaped).wanted
    assert want.jobs == ("any-topology", "this-topology")
    assert (want.pool, want.nodes) == ("tpu-burst", 2)  # a slice is the unit: one job each
    (want,) = schedule(replace(shaped, elastic=(CLOUD,))).wanted  # a pool of nodes without a shape takes no slice job
    assert want.jobs == ("no-shape",)


def test_jobs_go_on_the_nodes_on_their_way_first_and_only_the_rest_is_asked_for() -> None:
    coming = replace(CLOUD, coming=2, coming_at=NOW + 300)
    jobs = [job(f"j{i}", accelerators=8, at=i) for i in range(3)]
    d = schedule(full(*jobs[:2], pools=(coming,)))
    assert d.wanted == ()  # both fit the two nodes already asked for
    assert all("up in about 5 min" in p.message for p in d.pending)
    (want,) = schedule(full(*jobs, pools=(coming,))).wanted
    assert (want.nodes, want.jobs) == (1, ("j2",))


def test_without_pools_nothing_changes() -> None:
    s = full(job("j", accelerators=8))
    assert schedule(replace(s, elastic=())) == replace(
        schedule(s), wanted=(), pending=schedule(replace(s, elastic=())).pending
    )
    assert schedule(replace(s, elastic=())).wanted == ()


@PROPERTY
@given(snapshots(), st.data())
def test_pools_change_no_decision_and_ask_only_for_work_waiting_for_capacity(
    snapshot: Snapshot, data: st.DataObject
) -> None:
    flavors = sorted({f for q in snapshot.queues for f in q.flavors} | {n.flavor for n in snapshot.nodes}) or ["h100"]
    pools = tuple(
        Elastic(
            f"pool{k}",
            data.draw(st.sampled_from([c.name for c in snapshot.clusters])),
            data.draw(st.sampled_from(flavors)),
            data.draw(st.sampled_from([1, 4, 8])),
            data.draw(st.sampled_from([8_000, 96_000])),
            data.draw(st.sampled_from([16_384, 1_000_000])),
            data.draw(st.sampled_from([1.0, 2.5])),
            data.draw(st.sampled_from([60.0, 3600.0])),
            data.draw(st.integers(0, 6)),
            spot=data.draw(st.booleans()),
        )
        for k in range(data.draw(st.integers(1, 3)))
    )
    plain = schedule(snapshot)
    grown = schedule(replace(snapshot, elastic=pools))
    check(replace(snapshot, elastic=pools), grown)
    assert (grown.admissions, grown.preemptions, grown.reservations) == (
        plain.admissions,
        plain.preemptions,
        plain.reservations,
    )
    before = {p.job: p for p in plain.pending}
    jobs = {j.id: j for j in snapshot.pending}
    spec = {p.name: p for p in pools}
    asked: list[str] = []
    for want in grown.wanted:
        pool = spec[want.pool]
        assert 0 < want.nodes <= pool.most
        for job_id in want.jobs:
            assert before[job_id].reason in WANTING, before[job_id]
            assert not pool.spot or (jobs[job_id].spot and jobs[job_id].preemptible)
        asked += want.jobs
    assert len(asked) == len(set(asked))
    for p in grown.pending:
        assert p.reason is before[p.job].reason
        assert ("Capacity is being added" in p.message) == (p.job in asked)


def test_what_the_budget_has_left_bounds_how_long_the_new_nodes_are_asked_for() -> None:
    # a node costs 8 x 3.00 = 24.00 an hour and is held for its jobs' time limit and 10 idle minutes after
    budgeted = replace(CLOUD, left=30.0, idle_release=600.0)
    hour, day = job("hour", accelerators=8, time_limit=3000), job("day", accelerators=8, time_limit=86_400, at=1)
    (want,) = schedule(full(day, hour, pools=(budgeted,))).wanted
    assert want.jobs == ("hour",)  # 24.00 x (3000 + 600) / 3600 = 24.00 fits 30.00; a day of it does not
    assert want.hold == 3600.0
    two = (hour, replace(hour, id="hour2", submitted_at=hour.submitted_at + 1))
    (want,) = schedule(full(*two, pools=(budgeted,))).wanted
    assert (want.nodes, want.jobs) == (1, ("hour",))  # a second node of an hour would pass the budget
    day_only = schedule(full(day, pools=(budgeted,)))
    assert day_only.wanted == ()
    (told,) = day_only.pending
    assert "Capacity is being added" not in told.message
    assert told.message.endswith(
        "cloud-h100 on c1 could add nodes for it, but what its monthly budget has left does not pay for them until "
        "its time limit ends."
    )
    assert schedule(full(day, pools=(replace(budgeted, left=None),))).wanted[0].jobs == ("day",)


def test_horizons_spend_what_is_left_on_the_nodes_held_longest_first() -> None:
    # two nodes at 10.00 an hour, one paid for until NOW + 2 h (its work and 10 idle minutes), one idle since NOW
    held = {"busy": NOW + 7200.0, "idle": NOW + 600.0}
    reach, left = horizons(held, NOW, 600.0, 3 * 3600.0, 10.0, left=25.0)
    # busy: 3 h of work from now ends 1 h 10 min past what is paid: 11.67; idle: what is left, 13.33, buys 80 min
    assert reach["busy"] == 3 * 3600.0
    assert round(reach["idle"]) == round(13.3333 / 10.0 * 3600 + 600 - 600)
    assert left == 0.0
    reach, left = horizons(held, NOW, 600.0, 1800.0, 10.0, left=25.0)
    assert reach == {"busy": 6600.0, "idle": 1800.0}  # busy: its paid time already covers half an hour
    assert left is not None
    assert round(left, 2) == round(25.0 - 10.0 * 1800 / 3600, 2)
    assert horizons(held, NOW, 600.0, 3600.0, 10.0, left=None) == ({"busy": float("inf"), "idle": float("inf")}, None)
    reach, left = horizons(held, NOW, 600.0, 3600.0, 10.0, left=-5.0)  # over budget: only what is paid for
    assert reach == {"busy": 6600.0, "idle": 0.0}


def test_work_longer_than_a_nodes_horizon_does_not_go_there_and_shorter_work_does() -> None:
    pool_node = node("p1", horizon=3600.0)
    s = snapshot((pool_node,), (queue("a"),), (job("long", accelerators=8, time_limit=7200),))
    d = schedule(s)
    assert not admitted(d)
    assert reasons(d)["long"] is PendingReason.CAPACITY  # it could run there, had the budget paid for it
    s = snapshot(
        (pool_node,),
        (queue("a"),),
        (job("long", accelerators=8, time_limit=7200), job("short", accelerators=8, time_limit=3600, at=1)),
    )
    assert set(admitted(schedule(s))) == {"short"}
