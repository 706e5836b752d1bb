"""What-if studies: several options (buy, retire, reserve, burst) over one window and seeds, each option and seed a
``WhatIf`` with a task of its own (``whatif.run``), so that free workers run them at once; compared side by side
(``study_table``). ``scenarios_of`` reads options written one a line, as the page's form and ``qm whatif`` take
them.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from billing.actions.whatif import DEFAULT_DAYS, FIELDS, MAX_DAYS, MIN_DAYS, check, default_organization
from billing.models import WhatIf, WhatIfStudy
from common import enqueue, params
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Organization

#: One scenario a line: what the form's textarea accepts.
LINES = (
    re.compile(r"^(?P<verb>buy|retire|reserve)\s+(?P<nodes>\d+)\s+(?P<flavor>\S+)\s+in\s+(?P<cluster>\S+)"
               r"(?:\s+after\s+(?P<lead>\d+)\s+days?)?(?P<quotas>\s+with\s+quotas)?$", re.IGNORECASE),
    re.compile(r"^(?P<verb>burst)\s+(?:into\s+)?(?P<pool>\S+)(?:\s+up\s+to\s+(?P<nodes>\d+))?"
               r"(?P<quotas>\s+with\s+quotas)?$", re.IGNORECASE),
)  # fmt: skip
GRAMMAR = (
    "buy 4 H100 in onprem [after 60 days] · retire 2 H100 in onprem · reserve 8 H100 in cloud · "
    "burst cloud-burst [up to 6], each [with quotas] (the type's quotas grow with the fleet)"
)


def scenarios_of(text: str) -> tuple[list[dict[str, Any]], list[int], dict[str, str]]:
    """The scenarios the lines describe, the line each came from, and the lines not understood."""
    found: list[dict[str, Any]] = []
    lines: list[int] = []
    errors: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = " ".join(line.split())
        if not line or line.startswith("#"):
            continue
        match = next((m for pattern in LINES if (m := pattern.match(line))), None)
        if match is None:
            errors[f"line {number}"] = f"{line!r} is not a scenario; write one of: {GRAMMAR}."
            continue
        parts = match.groupdict()
        verb = parts["verb"].lower()
        quotas = {"grow_quotas": True} if parts["quotas"] else {}
        if verb == "burst":
            found.append({"kind": "burst", "pool": parts["pool"], "nodes": parts["nodes"], **quotas})
        else:
            nodes = int(parts["nodes"]) * (-1 if verb == "retire" else 1)
            kind = "reserve" if verb == "reserve" else "nodes"
            scenario = {"kind": kind, "nodes": nodes, "flavor": parts["flavor"], "cluster": parts["cluster"]}
            found.append({**scenario, "lead_days": parts["lead"] or 0, **quotas})
        lines.append(number)
    return found, lines, errors


MAX_SCENARIOS = 40
MAX_SEEDS = 10


def submit_study(
    actor: User,
    organization: Organization | None = None,
    *,
    name: Any = "",
    days: Any = DEFAULT_DAYS,
    seeds: Any = 1,
    scenarios: Any = (),
    http: HttpRequest | None = None,
) -> WhatIfStudy:
    """Ask for a study: each scenario (a what-if's ``cluster``, ``flavor``, ``nodes``, ``kind``, ``lead_days``,
    ``pool``) replayed over the same ``days`` for each seed, every pair a ``WhatIf`` with a task of its own, queued
    at the commit so that free workers take them at once. ``ValidationError`` names every bad field
    (``scenarios[2].nodes``) and nothing is written."""
    organization = default_organization(actor, organization)
    policy.require(actor, "whatif.run", organization)
    errors: dict[str, str] = {}
    title = str(name or "").strip()
    if not title:
        errors["name"] = "Required."
    elif len(title) > 120:
        errors["name"] = "At most 120 characters."
    span = params.whole(DEFAULT_DAYS if days in (None, "") else days, "days", MIN_DAYS, MAX_DAYS, errors, None)
    count = params.whole(1 if seeds in (None, "") else seeds, "seeds", 1, MAX_SEEDS, errors, None)
    checked: list[dict[str, Any]] = []
    if not isinstance(scenarios, list) or not scenarios:
        errors["scenarios"] = "A list of one scenario or more."
    elif len(scenarios) > MAX_SCENARIOS:
        errors["scenarios"] = f"At most {MAX_SCENARIOS} scenarios."
    else:
        for i, scenario in enumerate(scenarios):
            if not isinstance(scenario, dict):
                errors[f"scenarios[{i}]"] = "An object of the what-if's fields."
                continue
            unknown = set(scenario) - (set(FIELDS) - {"days"})
            for field in sorted(unknown):
                errors[f"scenarios[{i}].{field}"] = "Unknown field."
            values = {k: scenario.get(k) for k in FIELDS if k != "days"}
            try:
                checked.append(check(organization, days=span or DEFAULT_DAYS, **values))
            except ValidationError as error:
                for field, texts in error.message_dict.items():
                    errors[f"scenarios[{i}].{field}"] = " ".join(texts)
    if errors:
        raise ValidationError(errors)
    assert span is not None
    assert count is not None
    now = timezone.now()
    with transaction.atomic():
        study = WhatIfStudy.objects.create(
            organization=organization, requested_by=actor, name=title, days=span, seeds=count, created_at=now
        )
        made = [
            WhatIf(organization=organization, requested_by=actor, created_at=now, study=study, position=i, seed=seed,
                   **{**values, "days": span})
            for i, values in enumerate(checked)
            for seed in range(count)
        ]  # fmt: skip
        WhatIf.objects.bulk_create(made)
        audit.record(
            "what_if_study.requested",
            actor=actor,
            target=study,
            organization=organization,
            changes={"name": title, "days": span, "seeds": count, "scenarios": len(checked)},
            request=http,
        )
        ids = list(study.what_ifs.order_by("position", "seed").values_list("pk", flat=True))
        transaction.on_commit(lambda: [enqueue.send("billing.tasks.run_what_if", pk) for pk in ids])
    return study


def scenario_words(what_if: WhatIf) -> str:
    """A scenario in words: "Buy 4 H100 nodes in onprem-h100, arriving after 60 days", "Burst into cloud-burst"."""
    plural = "s" if abs(what_if.nodes) != 1 else ""
    if what_if.kind == WhatIf.Kind.BURST:
        assert what_if.pool is not None
        return f"Burst into {what_if.pool.name} (up to {what_if.nodes} node{plural}, {what_if.pool.capacity_type})"
    nodes = f"{abs(what_if.nodes)} {what_if.flavor.name} node{plural} in {what_if.cluster.slug}"
    if what_if.kind == WhatIf.Kind.RESERVE:
        return f"Reserve {nodes}"
    if what_if.nodes < 0:
        return f"Retire {nodes}"
    lead = f", arriving after {what_if.lead_days} days" if what_if.lead_days else ""
    return f"Buy {nodes}{lead}"


def scenario_label(what_if: WhatIf) -> str:
    """``scenario_words``, and whether quotas grow with the fleet."""
    words = scenario_words(what_if)
    return f"{words}, quotas grown with it" if what_if.grow_quotas else words


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def study_table(study: WhatIfStudy) -> dict[str, Any]:
    """The study side by side: today's fleet and each scenario, with the means over its seeds of cost, extra cost,
    mean and 95th-percentile wait, utilisation, hours of waiting saved and what each saved hour costs; and its
    progress (the what-ifs' mean)."""
    runs = list(study.what_ifs.select_related("cluster", "flavor", "pool").order_by("position", "seed"))
    done = [w for w in runs if w.status == WhatIf.Status.DONE and w.result]
    failed = [w for w in runs if w.status == WhatIf.Status.FAILED]
    progress = sum(w.progress for w in runs) / len(runs) if runs else 0.0
    rows: list[dict[str, Any]] = []
    todays = [w.result["today"] for w in done if w.position == 0]
    if todays:
        rows.append(_row("Today's fleet", todays, [], len(todays)))
    for position in sorted({w.position for w in runs}):
        mine = [w for w in runs if w.position == position]
        finished = [w for w in mine if w in done]
        row = _row(scenario_label(mine[0]), [w.result["changed"] for w in finished], finished, len(mine))
        row["position"] = position
        rows.append(row)
    return {
        "rows": rows,
        "progress": progress,
        "done": len(done),
        "failed": [{"what_if": w.pk, "error": w.error} for w in failed],
        "total": len(runs),
        "complete": len(done) + len(failed) == len(runs),
        "currency": study.organization.currency,
    }


def _row(label: str, figures: list[dict[str, Any]], runs: list[WhatIf], asked: int) -> dict[str, Any]:
    """One row of ``study_table``: means over the seeds done (None where none is)."""
    priced = [w.result["priced"] for w in runs]
    extra = [Decimal(p["extra_cost"]) for p in priced]
    per_hour = [Decimal(p["cost_per_wait_hour_saved"]) for p in priced if p["cost_per_wait_hour_saved"] is not None]
    costs = [Decimal(f["cost"]) for f in figures]

    def money(values: list[Decimal]) -> str | None:
        return str((sum(values, Decimal(0)) / len(values)).quantize(Decimal("0.01"))) if values else None

    return {
        "label": label,
        "seeds_done": len(figures),
        "seeds": asked,
        "cost": money(costs),
        "extra_cost": money(extra) if runs else None,
        "mean_wait_s": _mean([f["mean_wait_s"] for f in figures if f["mean_wait_s"] is not None]),
        "p95_wait_s": _mean([f["p95_wait_s"] for f in figures if f["p95_wait_s"] is not None]),
        "utilisation": _mean([f["utilisation"] for f in figures if f["utilisation"] is not None]),
        "wait_hours_saved": _mean([float(p["wait_hours_saved"]) for p in priced]) if runs else None,
        "cost_per_wait_hour_saved": money(per_hour) if runs and len(per_hour) == len(priced) else None,
    }
