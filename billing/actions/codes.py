"""Finance's codes: the organization's currency (ISO 4217, on every amount it shows) and the cost-centre code of each
team and project, carried into statements and exports. Changed by finance and organization admins through
``set_codes`` (every bad field named at once, nothing written; audited with the values before and after)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest

from billing.actions import prices
from common import currency
from common.validation import unknown_fields
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Organization, Project, Team

FIELDS = ("currency", "cost_centres")
CODE_MOST = 40


def codes(organization: Organization) -> dict[str, Any]:
    """The currency and the cost centres set (``team`` or ``team/project`` slugs to codes)."""
    centres = {t.slug: t.cost_centre for t in Team.objects.filter(organization=organization).exclude(cost_centre="")}
    projects = Project.objects.filter(team__organization=organization).exclude(cost_centre="").select_related("team")
    centres.update({f"{p.team.slug}/{p.slug}": p.cost_centre for p in projects})
    return {"currency": organization.currency, "cost_centres": dict(sorted(centres.items()))}


def _target(organization: Organization, key: str) -> Team | Project | None:
    team_slug, _, project_slug = key.partition("/")
    team = Team.objects.filter(organization=organization, slug=team_slug).first()
    if team is None or not project_slug:
        return team
    return Project.objects.filter(team=team, slug=project_slug).first()


def set_codes(
    actor: User, organization: Organization, data: Mapping[str, Any], http: HttpRequest | None = None
) -> dict[str, Any]:
    """Set the currency and/or cost centres given (``cost_centres``: ``{"vision": "CC-1001", "vision/detection":
    "CC-1002"}``; an empty code clears one). Fields left out are kept."""
    policy.require(actor, "price.set", organization, "Only finance or an organization admin may set billing codes.")
    errors: dict[str, str] = {name: " ".join(texts) for name, texts in unknown_fields(data, FIELDS).items()}
    code = data.get("currency", organization.currency)
    if "currency" in data and (reason := currency.check(code)):
        errors["currency"] = reason
    centres = data.get("cost_centres", {})
    targets: list[tuple[Team | Project, str]] = []
    if not isinstance(centres, Mapping):
        errors["cost_centres"] = 'An object of team (or "team/project") slugs to codes.'
    else:
        bad = []
        for key, value in centres.items():
            target = _target(organization, str(key))
            text = str(value if value is not None else "").strip()
            if target is None:
                bad.append(f"no team or project {key!r} in this organization")
            elif len(text) > CODE_MOST or not text.isprintable():
                bad.append(f"{key!r}: a code of at most {CODE_MOST} printable characters")
            else:
                targets.append((target, text))
        if bad:
            errors["cost_centres"] = "; ".join(bad).capitalize() + "."
    if errors:
        raise ValidationError(errors)
    before = codes(organization)
    with transaction.atomic():
        if "currency" in data:
            organization.currency = str(code)
            organization.save(update_fields=["currency"])
        for target, text in targets:
            target.cost_centre = text
            target.save(update_fields=["cost_centre"])
        after = codes(organization)
        if after != before:
            changes = {k: [before[k], after[k]] for k in FIELDS if before[k] != after[k]}
            audit.record("billing.codes_changed", actor=actor, organization=organization, changes=changes, request=http)
            prices.changed(organization.pk)
    return after
