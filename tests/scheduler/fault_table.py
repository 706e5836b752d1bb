"""The fault-injection matrix as a table, from the rows its scenarios wrote (``test_fault_matrix*.py``, one file
per backend, through ``fault_harness.py``)."""

from __future__ import annotations

import json
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "fault-matrix"
COLUMNS = ("backend", "fault", "end_state", "retries", "released", "copies_to_end", "timeline", "attempts", "note")


def render(directory: Path = ARTIFACTS) -> str:
    """A Markdown table of the rows written in this run, or "" when none were."""
    rows = [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))] if directory.is_dir() else []
    if not rows:
        return ""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = [str(row.get(c, "")).replace("|", "/") for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
