"""Slurm's compact strings, read into plain values: GRES specs, host lists, job states and why jobs fail.

Pure functions, no I/O, so the backend's mapping from slurmrestd's answers stays small and each rule is
tested on its own.
"""

from __future__ import annotations

import re

from clusters.backends.base import Failure, JobState

# One GRES entry: name[:type]:count, optionally followed by "(S:0-1)" or "(IDX:0-3)". Counts may carry a
# K/M/G suffix in Slurm, which GPUs never use; such an entry simply does not match and is ignored.
_GRES = re.compile(r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>\d+)(?:\(.*\))?$")


def gpu_gres(text: str) -> list[tuple[str, int]]:
    """The GPU entries of a GRES string as (type, count); type "" when the site does not name one.

    ``"gpu:h100:8"`` -> ``[("h100", 8)]``; ``"gpu:h100:2(IDX:0-1)"`` -> ``[("h100", 2)]``;
    ``"gpu:a100:4,gpu:h100:4,shard:8"`` -> ``[("a100", 4), ("h100", 4)]``; ``""`` or ``"(null)"`` -> ``[]``.
    """
    found: list[tuple[str, int]] = []
    for entry in _split_top_level(text):
        match = _GRES.match(entry.strip())
        if match and match["name"] == "gpu":
            found.append((match["type"] or "", int(match["count"])))
    return found


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Every host of a Slurm host list: ``"lab-node[1-2,4],gpu07"`` -> lab-node1, lab-node2, lab-node4, gpu07.

    Zero padding is kept (``"n[08-10]"`` -> n08, n09, n10) and several bracket groups multiply
    (``"r[1-2]n[1-2]"`` -> r1n1, r1n2, r2n1, r2n2). Raises ``ValueError`` on a malformed list.
    """
    hosts: list[str] = []
    for item in _split_top_level(text):
        if item:
            hosts.extend(_expand_one(item))
    return tuple(hosts)


def _expand_one(item: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        if "]" in item:
            raise ValueError(f"unbalanced ']' in host list entry {item!r}")
        return [item]
    end = item.find("]", start)
    if end < 0:
        raise ValueError(f"unbalanced '[' in host list entry {item!r}")
    prefix, ranges, rest = item[:start], item[start + 1 : end], item[end + 1 :]
    tails = _expand_one(rest) if rest else [""]
    names: list[str] = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"bad range {part!r} in host list entry {item!r}")
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            names.extend(f"{prefix}{number:0{width}d}{tail}" for tail in tails)
    return names


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets and parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part and part != "(null)"]


# Slurm 22.05's job_state strings (flags such as COMPLETING or CONFIGURING replace the base state in it).
_JOB_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "CONFIGURING": JobState.RUNNING,
    "RUNNING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    # still cleaning up on its nodes; the outcome is final only once this is over
    "COMPLETING": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "CANCELLED": JobState.CANCELLED,
    "FAILED": JobState.FAILED,
    "TIMEOUT": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    # preempted by Slurm's own policy (not by Quartermaster, which cancels): the work did not finish
    "PREEMPTED": JobState.FAILED,
}


def job_state(text: str) -> JobState:
    """Quartermaster's state for a Slurm job_state string; UNKNOWN for one this version does not know."""
    return _JOB_STATES.get(text.upper(), JobState.UNKNOWN)


#: Job states that say why the job ended, as ``Failure`` codes (FAILED says it through its exit code).
_ENDED: dict[str, Failure] = {
    "OUT_OF_MEMORY": Failure.OOM_KILLED,
    "TIMEOUT": Failure.TIME_LIMIT,
    "DEADLINE": Failure.TIME_LIMIT,
    "NODE_FAIL": Failure.NODE_LOST,
    "BOOT_FAIL": Failure.NODE_LOST,
    "PREEMPTED": Failure.PREEMPTED,
}
#: Pending reasons Slurm will not clear by itself: the job asks for what the cluster's configuration or
#: accounts do not allow, or waits on a dependency that can no longer be met.
NEVER_CLEARS = frozenset(
    {
        "BadConstraints",
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "InvalidAccount",
        "InvalidQOS",
        "DependencyNeverSatisfied",
    }
)
#: Pending reasons that say the job waits for nodes or resources it cannot have now.
WAITS_FOR_NODES = frozenset({"Resources", "ReqNodeNotAvail", "NodeDown", "PartitionDown", "PartitionInactive"})


def failure(state: str, reason: str, exit_code: int | None) -> str:
    """The ``Failure`` code of a job in ``state`` with Slurm's ``reason`` (its ``state_reason``) and exit code;
    "" when nothing is wrong (running, succeeded, waiting its turn) or Slurm says nothing more.

    ``"OUT_OF_MEMORY"`` -> oom_killed; ``"FAILED"`` with exit code 3 -> exit_code; ``"PENDING"`` with
    ``"PartitionTimeLimit"`` -> invalid; ``"PENDING"`` with ``"ReqNodeNotAvail, UnavailableNodes:n1"``
    -> unschedulable.
    """
    state = state.upper()
    if state in _ENDED:
        return _ENDED[state]
    if state == "FAILED":
        return Failure.EXIT_CODE if exit_code else ""
    if job_state(state) is JobState.PENDING:
        # "ReqNodeNotAvail, UnavailableNodes:lab-node2": the reason is its first word
        word = reason.split(",", 1)[0].strip()
        if word in NEVER_CLEARS:
            return Failure.INVALID
        if word in WAITS_FOR_NODES:
            return Failure.UNSCHEDULABLE
    return ""


#: Names of a tree's switch levels, from the leaves up (``scontrol show topology`` counts Level=0 at the
#: leaves); a deeper tree's upper levels are ``level3``, ``level4``, ...
TREE_LEVELS = ("leaf", "spine", "core")


def topology(text: str) -> tuple[tuple[str, ...], dict[str, dict[str, str]]]:
    """The levels (widest first) and each node's domain at each level, from ``scontrol show topology``.

    topology/tree (``SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]``, with ``Switches=`` above the
    leaves): a level per switch level, named ``leaf``, ``spine``, ``core`` from the bottom, e.g. levels
    ``("spine", "leaf")`` and ``{"n1": {"spine": "s1", "leaf": "leaf1"}}``. topology/block
    (``BlockName=b1 BlockIndex=0 Nodes=n[1-2] BlockSize=2``): one level, ``block``. No topology plugin,
    or nothing Slurm knows: no levels. Raises ``ValueError`` on a malformed node list.
    """
    switches: list[tuple[int, str, tuple[str, ...]]] = []
    blocks: list[tuple[str, tuple[str, ...]]] = []
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        nodes = expand_hostlist(fields.get("Nodes", ""))
        if "SwitchName" in fields:
            word = fields.get("Level", "0")
            if not word.isdigit():
                raise ValueError(f"switch {fields['SwitchName']} has level {word!r}, not a number")
            switches.append((int(word), fields["SwitchName"], nodes))
        elif "BlockName" in fields:
            blocks.append((fields["BlockName"], nodes))
    domains: dict[str, dict[str, str]] = {}
    if blocks:
        for name, nodes in blocks:
            for node in nodes:
                domains.setdefault(node, {}).setdefault("block", name)  # a base block before any aggregate
        return ("block",), domains
    if not switches:
        return (), {}
    top = max(level for level, _, _ in switches)
    names = [TREE_LEVELS[level] if level < len(TREE_LEVELS) else f"level{level}" for level in range(top + 1)]
    for level, switch, nodes in sorted(switches, key=lambda found: -found[0]):  # widest first
        for node in nodes:
            domains.setdefault(node, {})[names[level]] = switch
    return tuple(reversed(names)), domains
