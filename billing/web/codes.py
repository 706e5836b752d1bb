"""Finance's codes, under ``/billing/codes/``: the organization's currency and its teams' and projects' cost centres
(finance and admins). Thin: ``billing/actions/codes.py`` judges and audits; a refusal is shown by its field (400)."""

from __future__ import annotations

from http import HTTPStatus

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from billing import params
from billing.actions import codes
from common.types import AuthenticatedHttpRequest
from tenancy import policy
from tenancy.models import Project, Team


def _centres(text: str) -> dict[str, str]:
    """``team = code`` (or ``team/project = code``) lines as a mapping; a line without ``=`` names no code."""
    found = {}
    for line in text.splitlines():
        key, sep, code = line.partition("=")
        if key.strip():
            found[key.strip()] = code.strip() if sep else ""
    return found


@require_http_methods(["GET", "POST"])
def codes_edit(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The currency and cost centres (GET), or them changed (POST: ``currency``, ``cost_centres`` as lines)."""
    organization = params.organization(request.user, request.GET.get("organization"))
    policy.require(
        request.user, "price.set", organization, "Only finance or an organization admin may set billing codes."
    )
    current = codes.codes(organization)
    targets = [t.slug for t in Team.objects.filter(organization=organization).order_by("name")]
    targets += [
        f"{p.team.slug}/{p.slug}"
        for p in Project.objects.filter(team__organization=organization)
        .select_related("team")
        .order_by("team__name", "name")
    ]
    lines = "\n".join(f"{key} = {current['cost_centres'].get(key, '')}" for key in targets)
    context = {"organization": organization, "currency": current["currency"], "lines": lines, "errors": {}}
    if request.method == "POST":
        data = {
            "currency": request.POST.get("currency", ""),
            "cost_centres": _centres(request.POST.get("cost_centres", "")),
        }
        try:
            codes.set_codes(request.user, organization, data, http=request)
        except ValidationError as exc:
            context.update(
                currency=data["currency"],
                lines=request.POST.get("cost_centres", ""),
                errors={field: " ".join(texts) for field, texts in exc.message_dict.items()},
            )
            return render(request, "billing/codes.html", context, status=HTTPStatus.BAD_REQUEST)
        messages.success(request, "Billing codes saved: statements carry them from now on (closed months keep theirs).")
        return redirect(f"{reverse('billing-codes')}?organization={organization.slug}")
    return render(request, "billing/codes.html", context)
