"""An array request: one job request run as many tasks, each with its index and parameters, and the checks
of its shape (docs/jobs.md §Arrays and sweeps).

The tasks are given one of three ways: an index range (``"0-99"``, ``"0-99:2"``, ``"1,5,10-12"``), a grid
(the cartesian product of parameter lists, ``{"lr": [0.1, 0.01], "depth": [2, 4]}``: four tasks) or a list
of parameter dicts. ``tasks`` expands the request into ``(index, params)`` pairs; ``shape_errors`` says
what is wrong with it by field, as ``submission.shape_errors`` does for the job request it wraps. The
actions (``scheduler/actions/arrays.py``) and the form, the API and ``qm`` all use these.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.submission import ENV_NAME, JobRequest

#: The array's own fields (the rest of a request is its job request's).
ARRAY_FIELDS = ("range", "grid", "params", "max_running")
#: The most tasks one array may have.
MAX_TASKS = 10_000
#: The longest parameters of one task, as JSON (``QM_PARAMS``).
MAX_PARAMS_JSON = 4_000
PART = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
RANGE_HELP = "Give indices such as 0-99, 0-99:2 (every second) or 1,5,10-12."


@dataclass
class ArrayRequest:
    """A job request to run as many tasks: exactly one of ``range``, ``grid`` and ``params``; at most
    ``max_running`` of them placed at once (None: no limit)."""

    job: JobRequest
    range: str = ""
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    params: Sequence[Mapping[str, Any]] = ()
    max_running: int | None = None

    def spec(self) -> dict[str, Any]:
        """How the tasks were given, as ``JobArray.spec`` keeps it."""
        if self.range.strip():
            return {"range": self.range.strip()}
        if self.grid:
            return {"grid": {k: list(v) for k, v in self.grid.items()}}
        return {"params": [dict(p) for p in self.params]}


class BadArray(ValueError):
    """What is wrong with an array request, naming its field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field_name, message


def indices(text: str) -> list[int]:
    """The indices of a range such as ``0-99:2`` or ``1,5,10-12``, in order, each once."""
    found: set[int] = set()
    for part in text.replace(" ", "").split(","):
        match = PART.match(part)
        if not match:
            raise BadArray("range", f"{part!r} is not a range. {RANGE_HELP}")
        first, last, step = match.group(1), match.group(2), match.group(3)
        low = int(first)
        high = int(last) if last is not None else low
        stride = int(step) if step is not None else 1
        if high < low or stride < 1:
            raise BadArray(
                "range", f"{part!r} goes nowhere: give first-last with last >= first and a step of 1 or more."
            )
        if (high - low) // stride + 1 + len(found) > MAX_TASKS:
            raise BadArray("range", f"An array has at most {MAX_TASKS:,} tasks.")
        found.update(range(low, high + 1, stride))
    return sorted(found)


def _check_params(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(params, Mapping):
        raise BadArray(where, 'Each set of parameters is an object of names and values, e.g. {"lr": 0.1}.')
    for name, value in params.items():
        if not ENV_NAME.match(str(name)):
            raise BadArray(where, f"{name!r} is not a valid parameter name (letters, digits and _).")
        if not isinstance(value, str | int | float | bool) or value is None:
            raise BadArray(where, f"Parameter {name} must be a string, a number or true/false.")
    if len(json.dumps(dict(params))) > MAX_PARAMS_JSON:
        raise BadArray(where, f"The parameters of one task are at most {MAX_PARAMS_JSON:,} characters as JSON.")
    return dict(params)


def _grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    if not isinstance(grid, Mapping) or not grid:
        raise BadArray("grid", 'A grid is an object of parameter names and lists of values, e.g. {"lr": [0.1, 0.01]}.')
    size = 1
    for name, values in grid.items():
        if not isinstance(values, list | tuple) or not values:
            raise BadArray("grid", f"Give parameter {name} a non-empty list of values.")
        size *= len(values)
        if size > MAX_TASKS:
            raise BadArray("grid", f"The grid makes more than {MAX_TASKS:,} tasks; an array has at most that many.")
    names = list(grid)
    combos = [dict(zip(names, values, strict=True)) for values in itertools.product(*(grid[n] for n in names))]
    return [_check_params(c, "grid") for c in combos]


def tasks(request: ArrayRequest) -> list[tuple[int, dict[str, Any]]]:
    """The tasks of ``request``: (index, parameters) each; raises ``BadArray`` naming the field."""
    given = [
        name
        for name, value in (("range", request.range.strip()), ("grid", request.grid), ("params", request.params))
        if value
    ]
    if len(given) != 1:
        raise BadArray("range", "Give exactly one of a range of indices, a grid of parameters or a list of parameters.")
    if given == ["range"]:
        return [(i, {}) for i in indices(request.range)]
    if given == ["grid"]:
        return list(enumerate(_grid(request.grid)))
    if not isinstance(request.params, list | tuple):
        raise BadArray("params", "Give a list of parameter objects.")
    if len(request.params) > MAX_TASKS:
        raise BadArray("params", f"An array has at most {MAX_TASKS:,} tasks.")
    return [(i, _check_params(p, "params")) for i, p in enumerate(request.params)]


def shape_errors(request: ArrayRequest) -> dict[str, str]:
    """What is wrong with the array's own fields (not its job request's), by field."""
    errors: dict[str, str] = {}
    try:
        tasks(request)
    except BadArray as error:
        errors[error.field] = error.message
    limit = request.max_running
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        errors["max_running"] = "At most how many tasks run at once: a whole number, 1 or more (empty: no limit)."
    return errors
