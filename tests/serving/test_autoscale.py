"""The autoscaler's rule (serving/autoscale.py), driven tick by tick on an explicit clock."""

from __future__ import annotations

from collections.abc import Callable

from serving.autoscale import Decision, Observation, Scaling, decide, recommend

TICK = 5.0


class Run:
    """A service under the autoscaler: feed it a load per tick, it keeps the history as the control loop does."""

    def __init__(self, scaling: Scaling, current: int = 1) -> None:
        self.scaling = scaling
        self.current = current
        self.now = 0.0
        self.history: list[tuple[float, int]] = []
        self.last_request: float | None = None

    def tick(self, total: float, *, requests: bool = True, demand: bool = False) -> Decision:
        self.now += TICK
        if (requests and total > 0) or demand:  # the control loop counts a waiting request as a request
            self.last_request = self.now
        idle = None if self.last_request is None else self.now - self.last_request
        seen = Observation(now=self.now, total=total, current=self.current, idle_for=idle, demand=demand)
        decision = decide(self.scaling, seen, self.history)
        self.history.append((self.now, decision.recommended))
        self.current = decision.desired
        return decision

    def run(self, seconds: float, load: Callable[[int], float] | float) -> list[int]:
        counts = []
        for i in range(int(seconds / TICK)):
            self.tick(load(i) if callable(load) else load)
            counts.append(self.current)
        return counts


def test_recommend_is_the_ceiling_of_load_over_target() -> None:
    assert recommend(0, 10) == 0
    assert recommend(10, 10) == 1
    assert recommend(10.0000000001, 10) == 1  # float noise does not buy a replica
    assert recommend(11, 10) == 2
    assert recommend(95, 10) == 10
    assert recommend(0.3 * 3, 0.3) == 3


def test_a_step_up_scales_once_the_up_window_has_passed() -> None:
    run = Run(Scaling(min_replicas=1, max_replicas=10, target=10, scale_up_window=30, scale_down_window=300))
    assert run.run(60, 5) == [1] * 12
    counts = run.run(60, 45)  # a step to 45 rps: five replicas' worth
    first = counts.index(5)
    assert counts[:first] == [1] * first
    assert first * TICK >= 30 - TICK  # not before the window was full of the new load
    assert counts[first:] == [5] * (len(counts) - first)


def test_a_step_down_waits_for_the_down_window() -> None:
    run = Run(Scaling(min_replicas=1, max_replicas=10, target=10, scale_up_window=0, scale_down_window=300), current=1)
    run.run(60, 80)
    assert run.current == 8
    counts = run.run(600, 15)  # the load falls to two replicas' worth
    first = counts.index(2)
    assert all(c == 8 for c in counts[:first])
    assert (first + 1) * TICK >= 300
    assert counts[-1] == 2


def test_noise_around_a_boundary_does_not_flap() -> None:
    run = Run(Scaling(min_replicas=1, max_replicas=10, target=10, scale_up_window=30, scale_down_window=300))
    run.run(120, 38)  # settle at four replicas
    assert run.current == 4
    counts = run.run(1200, lambda i: 38 if i % 2 else 31)  # 3.1 .. 3.8 replicas' worth, every other tick
    assert set(counts) == {4}
    counts = run.run(1200, lambda i: 42 if i % 3 == 0 else 35)  # a spike above 4 one tick in three
    assert set(counts) == {4}


def test_a_short_burst_buys_nothing() -> None:
    run = Run(Scaling(min_replicas=2, max_replicas=10, target=10, scale_up_window=30))
    run.current = 2
    counts = run.run(200, lambda i: 100 if i in (10, 11) else 12)
    assert set(counts) == {2}


def test_bounds_clamp_the_answer() -> None:
    run = Run(Scaling(min_replicas=2, max_replicas=4, target=10, scale_up_window=0, scale_down_window=0), current=2)
    assert run.tick(1000).desired == 4
    assert "bounded" in run.tick(1000).reason
    assert run.tick(0).desired == 2


def test_scale_to_zero_after_the_idle_time_and_back_on_a_request() -> None:
    scaling = Scaling(min_replicas=0, max_replicas=3, target=10, scale_up_window=30, scale_to_zero_after=120)
    run = Run(scaling, current=1)
    run.tick(4)  # a request
    counts = run.run(200, 0)
    first = counts.index(0)
    assert counts[:first] == [1] * first
    assert (first + 1) * TICK >= 120
    assert set(counts[first:]) == {0}
    decision = run.tick(0, requests=False, demand=True)  # a request waits at the endpoint
    assert decision.desired == 1
    assert "zero to one" in decision.reason
    assert run.tick(0).desired == 1  # it was just asked for: idle time counts from the request


def test_min_zero_keeps_one_while_requests_come() -> None:
    run = Run(Scaling(min_replicas=0, max_replicas=3, target=10, scale_to_zero_after=60), current=1)
    assert set(run.run(600, 3)) == {1}


def test_at_zero_without_demand_stays_at_zero() -> None:
    run = Run(Scaling(min_replicas=0, max_replicas=3, target=10, scale_to_zero_after=60), current=0)
    run.last_request = -1000.0
    assert set(run.run(100, 0)) == {0}


def test_no_min_zero_never_reaches_zero() -> None:
    run = Run(Scaling(min_replicas=1, max_replicas=3, target=10, scale_down_window=0), current=3)
    assert set(run.run(600, 0)[1:]) == {1}
