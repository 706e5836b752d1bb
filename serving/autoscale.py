"""How many replicas a service wants, from its measured load: pure Python, no Django, no clock.

The rule is Kubernetes' Horizontal Pod Autoscaler's, with both of its stabilisation windows (docs/services.md):

1. **Recommend.** ``ceil(total / target)``: the metric summed over the replicas (requests per second, requests in
   flight, or GPU utilization in percent) over what one replica should carry.
2. **Stabilise.** Scale *up* only to the lowest recommendation of the last ``scale_up_window`` seconds (load
   must last the window: one burst does not buy replicas), and *down* only to the highest recommendation of the
   last ``scale_down_window`` seconds (load must have stayed low for the whole window: noise around a
   boundary never makes the count flap, each dip is outlasted by the next peak).
3. **Bound.** Clamp to ``[max(min_replicas, 1), max_replicas]``.
4. **Zero.** With ``min_replicas`` 0, a service that has had no request for ``scale_to_zero_after`` seconds
   goes to zero; at zero, a request waiting (``demand``) brings it back to at least one at once, with no window.

Times are seconds on any one clock (the control loop passes epoch seconds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Scaling:
    """A service's scaling settings."""

    min_replicas: int
    max_replicas: int
    target: float
    scale_up_window: float = 30.0
    scale_down_window: float = 300.0
    scale_to_zero_after: float | None = None


@dataclass(frozen=True)
class Observation:
    """What the control loop measured this tick."""

    now: float
    #: The metric summed over the service's ready replicas.
    total: float
    #: Replicas the service has now (its last desired count).
    current: int
    #: Seconds since the last request (None: none ever).
    idle_for: float | None = None
    #: A request is waiting for a replica (at zero).
    demand: bool = False


@dataclass(frozen=True)
class Decision:
    desired: int
    #: Step 1's recommendation this tick, to be kept for the windows of later ticks.
    recommended: int
    #: Why, in words (for the service's page and the logs).
    reason: str


def recommend(total: float, target: float) -> int:
    """Step 1: replicas to carry ``total`` at ``target`` each (a hair of float error does not add one)."""
    if total <= 0 or target <= 0:
        return 0
    return max(0, math.ceil(total / target - 1e-9))


def decide(scaling: Scaling, seen: Observation, history: Sequence[tuple[float, int]]) -> Decision:
    """The desired replica count. ``history`` holds earlier ``(time, recommended)`` pairs, in any order; those
    older than the longer window are ignored."""
    raw = recommend(seen.total, scaling.target)
    low = max(scaling.min_replicas, 1)
    high = max(scaling.max_replicas, 1)
    if seen.current == 0 and seen.demand:
        return Decision(min(max(raw, 1, scaling.min_replicas), high), raw, "a request is waiting: from zero to one")
    may_idle = scaling.min_replicas == 0 and scaling.scale_to_zero_after is not None
    if may_idle and seen.current == 0 and raw == 0:
        return Decision(0, raw, "at zero, no requests")
    if may_idle and raw == 0 and seen.idle_for is not None and seen.idle_for >= (scaling.scale_to_zero_after or 0):
        return Decision(0, raw, f"no request for {seen.idle_for:.0f} s: to zero")
    up = [r for t, r in history if seen.now - t < scaling.scale_up_window] + [raw]
    down = [r for t, r in history if seen.now - t < scaling.scale_down_window] + [raw]
    current = seen.current
    if min(up) > current:
        wanted, reason = min(up), f"load held for the up window ({scaling.scale_up_window:.0f} s)"
    elif max(down) < current:
        wanted, reason = max(down), f"load low for the down window ({scaling.scale_down_window:.0f} s)"
    else:
        wanted, reason = current, "steady"
    desired = min(max(wanted, low), high)
    if desired != wanted:
        reason = f"{reason}; bounded to [{low}, {high}]"
    return Decision(desired, raw, reason)
