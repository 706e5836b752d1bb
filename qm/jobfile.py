"""Job files for ``qm submit``: a YAML mapping of the API's submission fields, read so that nothing surprising is
sent (no repeated keys, anchors or aliases, numbers that are not finite), and each key's line kept so that the
API's refusal of a field points at the line it is on.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from qm.client import BAD_INPUT, CliError, field_messages


class JobFileLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading numbers as YAML 1.2 and JSON do: ``1e999`` is a number (too big: refused
    as not finite), not the text PyYAML's YAML 1.1 rules would make of it."""


JobFileLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)$"),
    list("-+.0123456789"),
)
FLOAT_TAG = "tag:yaml.org,2002:float"


@dataclass
class JobFile:
    """A job file's fields, and the line each top-level key is on (to point at it when the API refuses it)."""

    name: str
    fields: dict[str, Any]
    lines: dict[str, int]

    def refused(self, error: CliError) -> CliError:
        """The API's refusal with each field's line in this file (the API alone knows the fields: an unknown
        one is named there, with the closest known name)."""
        for key, messages in error.fields.items():
            if key in self.lines:
                error.fields[key] = [f"{message} (line {self.lines[key]})" for message in field_messages(messages)]
        return error


def read_job_file(name: str, stdin: TextIO | None = None) -> dict[str, Any]:
    """A job file's fields: a YAML mapping of the API's submission fields (``load_job_file``)."""
    return load_job_file(name, stdin).fields


def load_job_file(name: str, stdin: TextIO | None = None) -> JobFile:
    """A job file: a YAML mapping of the API's submission fields (which fields there are is the API's to
    say). Malformed YAML, a repeated key, an anchor or alias, or a number that is not finite (``.nan``,
    ``.inf``, ``1e999``) is refused here, with its line, before anything is sent."""
    try:
        text = (stdin or sys.stdin).read() if name == "-" else Path(name).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"Cannot read {name}: {getattr(error, 'strerror', None) or error}", status=BAD_INPUT) from None
    try:
        if unsendable := unsendable_values(text):
            raise CliError(f"{name}: {', '.join(unsendable)}: cannot be sent as it is.", unsendable, BAD_INPUT)
        root = yaml.compose(text, Loader=JobFileLoader)
    except yaml.YAMLError as error:
        raise CliError(f"{name}: not valid YAML: {_yaml_problem(error)}", status=BAD_INPUT) from None
    if root is None:
        raise CliError(f"{name} is empty: it should map fields to values (name: train, ...).", status=BAD_INPUT)
    if not isinstance(root, yaml.MappingNode):
        raise CliError(
            f"{name}, line {root.start_mark.line + 1}: the file should map fields to values (name: train, ...).",
            status=BAD_INPUT,
        )
    problems: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    for key_node, _ in root.value:
        line = key_node.start_mark.line + 1
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
        if key in seen:
            problems[key] = [f"line {line}: given twice (first on line {seen[key]})."]
        seen.setdefault(key, line)
    if problems:
        raise CliError(f"{name}: {', '.join(problems)} not allowed here.", problems, BAD_INPUT)
    try:
        data = yaml.load(text, Loader=JobFileLoader)  # noqa: S506 - a SafeLoader, with YAML 1.2 numbers
    except yaml.YAMLError as error:
        raise CliError(f"{name}: not valid YAML: {_yaml_problem(error)}", status=BAD_INPUT) from None
    assert isinstance(data, dict)
    return JobFile(name, data, seen)


@dataclass
class _Collection:
    """Where the event walk of ``unsendable_values`` is: in a mapping (at a key or at its value) or a list."""

    path: str
    mapping: bool
    at_key: bool = True
    key: str = "?"
    index: int = 0

    def child(self) -> str:
        if not self.mapping:
            return f"{self.path}[{self.index}]"
        return f"{self.path}.{self.key}" if self.path else self.key

    def advance(self) -> None:
        if self.mapping:
            self.at_key = not self.at_key
        else:
            self.index += 1


def unsendable_values(text: str) -> dict[str, list[str]]:
    """What a job file holds that must not be sent, by key (``env.SEED``, ``command[2]``), each with its
    line: anchors and aliases (a few lines of them can expand to gigabytes, and a key that quietly repeats
    another's value is not what anyone reviewing the file reads), and numbers that are not finite (JSON has
    none; the server would read them as something else or not at all). Read from the parser's events, so
    nothing is expanded or built first."""
    problems: dict[str, list[str]] = {}
    loader = JobFileLoader(text)
    stack: list[_Collection] = []
    try:
        while loader.check_event():
            event = loader.get_event()  # type: ignore[no-untyped-call]
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                stack.pop()
                if stack:
                    stack[-1].advance()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            here = stack[-1] if stack else None
            is_key = here is not None and here.mapping and here.at_key
            where = (here.path if is_key else here.child()) if here is not None else ""
            line = f"line {event.start_mark.line + 1}" if event.start_mark else "a line"
            if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
                problems.setdefault(where or "(the file)", []).append(
                    f"{line}: YAML anchors and aliases are not allowed; write the value out."
                )
            if isinstance(event, yaml.ScalarEvent) and not is_key and _not_finite(loader, event):
                problems.setdefault(where or "(the file)", []).append(
                    f"{line}: {event.value!r} is not a finite number."
                )
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                stack.append(_Collection(where, isinstance(event, yaml.MappingStartEvent)))
                continue
            if here is not None:
                if is_key:
                    here.key = event.value if isinstance(event, yaml.ScalarEvent) else "?"
                here.advance()
    finally:
        loader.dispose()
    return problems


def _not_finite(loader: JobFileLoader, event: yaml.ScalarEvent) -> bool:
    tag = event.tag
    if tag in (None, "!"):
        tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
    if tag != FLOAT_TAG:
        return False
    try:
        number = loader.construct_yaml_float(yaml.ScalarNode(FLOAT_TAG, event.value))
    except ValueError:
        return False  # not a number at all: the loader says so after this
    return not math.isfinite(number)


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def read_runtime_env(name: str) -> Any:
    """A Ray runtime environment from a JSON or YAML file (JSON is YAML); the API judges what it holds."""
    try:
        text = Path(name).read_text()
    except (OSError, UnicodeDecodeError) as error:
        message = f"Cannot read {name}: {getattr(error, 'strerror', None) or error}"
        raise CliError(message, {"runtime_env": [message]}, BAD_INPUT) from None
    try:
        return yaml.load(text, Loader=JobFileLoader)  # noqa: S506 - a SafeLoader, with YAML 1.2 numbers
    except yaml.YAMLError as error:
        message = f"{name}: not valid JSON or YAML: {_yaml_problem(error)}"
        raise CliError(message, {"runtime_env": [message]}, BAD_INPUT) from None
