"""Nodes lent to one team (``Node.team``: a TPU slice its owner shares with a team, docs/scheduling.md §Nodes
lent to a team): only that team's jobs are placed there, and the rest of the fleet is everyone's."""

from __future__ import annotations

from scheduler.engine import schedule
from scheduler.engine.model import PendingReason

from .test_phases import admitted, job, node, queue, reasons, snapshot

QUEUES = (queue("a"), queue("b"))


def nodes_of(decisions: object, job_id: str) -> set[str]:
    return {a.node for a in admitted(decisions)[job_id].assignments}  # type: ignore[attr-defined]


def test_a_lent_node_takes_its_teams_job_and_no_one_elses():
    fleet = (node("lent", team="red"),)
    asks = (job("theirs", queue="b", team="blue", accelerators=8), job("mine", queue="a", team="red", accelerators=8))
    d = schedule(snapshot(fleet, QUEUES, asks))  # type: ignore[arg-type]
    assert nodes_of(d, "mine") == {"lent"}
    assert "theirs" not in admitted(d)
    # Another team's job sees no node it may use: it never fits, rather than waiting for the lent node.
    assert reasons(d)["theirs"] is PendingReason.NEVER_FITS


def test_a_job_of_no_team_uses_only_nodes_lent_to_none():
    fleet = (node("lent", team="red"), node("shared"))
    d = schedule(snapshot(fleet, QUEUES, (job("j", accelerators=8),)))  # type: ignore[arg-type]
    assert nodes_of(d, "j") == {"shared"}


def test_the_lending_team_also_uses_the_shared_fleet():
    fleet = (node("lent", team="red"), node("shared"))
    asks = (job("r1", team="red", accelerators=8), job("r2", team="red", accelerators=8, at=1))
    d = schedule(snapshot(fleet, QUEUES, asks))  # type: ignore[arg-type]
    assert nodes_of(d, "r1") | nodes_of(d, "r2") == {"lent", "shared"}


def test_a_gang_spans_the_lent_node_and_the_shared_one_for_its_team_only():
    fleet = (node("lent", team="red"), node("shared"))
    red = schedule(snapshot(fleet, QUEUES, (job("g", team="red", workers=2, accelerators=8),)))  # type: ignore[arg-type]
    assert nodes_of(red, "g") == {"lent", "shared"}
    blue = schedule(snapshot(fleet, QUEUES, (job("g", queue="b", team="blue", workers=2, accelerators=8),)))  # type: ignore[arg-type]
    assert "g" not in admitted(blue)
