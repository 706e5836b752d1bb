"""Forms of the quota pages. They check shape only (a choice among what the user may see, a reason given);
``governance/actions/quotas.py`` judges the amounts, the names and who may change what."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from clusters.models import AcceleratorType
from governance.actions.budgets import FIELDS as BUDGET_FIELDS
from governance.actions.quotas import MAX_REASON
from governance.models import Budget, Cohort, Quota
from tenancy.models import Organization, Project, Team
from tenancy.scoping import Action

AMOUNT_HELP = "Empty: no limit."
TEAM_QUEUE = "team"
TEAM_BUDGET = "team"


def _amount(label: str, help_text: str = AMOUNT_HELP, required: bool = False) -> forms.CharField:
    # Text, not a number input: the browser must not refuse a value before the server names what is wrong.
    return forms.CharField(
        label=label, required=required, help_text=help_text, widget=forms.TextInput(attrs={"inputmode": "decimal"})
    )


class LimitsForm(forms.Form):
    """A flavor, a resource, the three limits and a reason: the fields ``quotas.set_quota`` takes."""

    flavor = forms.ChoiceField(label="Accelerator type")
    resource = forms.ChoiceField(label="Resource", choices=Quota.Resource.choices, initial=Quota.Resource.ACCELERATORS)
    nominal = _amount("Nominal quota", "In accelerators, cores or GiB.", required=True)
    borrowing_limit = _amount("May borrow")
    lending_limit = _amount("May lend")
    reason = forms.CharField(label="Reason", max_length=MAX_REASON, help_text="Kept in the quota history.")

    def __init__(self, organization: Organization, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = (
            AcceleratorType.objects.filter(organization=organization).order_by("name").values_list("name", flat=True)
        )
        self.fields["flavor"].choices = [(name, name) for name in names]  # type: ignore[attr-defined]


class TeamQuotaForm(LimitsForm):
    """A quota for one of a team's queues: the team's own (admins) or a project's, given a queue of its own
    on first use (``quotas.give_project_quota``). ``target`` is ``team`` or ``project:<id>``."""

    target = forms.ChoiceField(label="For")

    field_order = ["target", "flavor", "resource", "nominal", "borrowing_limit", "lending_limit", "reason"]

    def __init__(self, team: Team, *args: Any, admin: bool, **kwargs: Any) -> None:
        super().__init__(team.organization, *args, **kwargs)
        choices = [(TEAM_QUEUE, f"the team's own queue ({team.slug})")] if admin else []
        projects = team.projects.filter(archived=False).order_by("name")
        choices += [(f"project:{p.pk}", f"project {p.name}") for p in projects]
        self.fields["target"].choices = choices  # type: ignore[attr-defined]
        self.projects = {f"project:{p.pk}": p for p in projects}


class BudgetForm(forms.Form):
    """A monthly budget of a team (``team``) or of one of its projects (``project:<id>``): the fields
    ``budgets.set_budget`` takes. The choice offers the budgets the user may set, but any of the team's projects
    is taken, so that ``set_budget`` says who may set it (403). Nothing else is judged here: ``set_budget``
    names every bad amount, address and URL at once."""

    target = forms.CharField(label="For", widget=forms.Select)
    accelerator_hours = _amount("Accelerator-hours a month", "Empty: no limit of accelerator-hours.")
    amount = _amount("Money a month", "Empty: no limit of money. Both empty: no budget.")
    counts = forms.ChoiceField(
        label="Money counts",
        choices=Budget.Counts.choices,
        initial=Budget.Counts.USAGE,
        required=False,
        help_text="Usage: the jobs at their prices. Full charge: with the shares of idle capacity and overhead, "
        "as on the team's statement.",
    )
    hard = forms.BooleanField(
        label="Hard", required=False, help_text="Jobs that would pass it wait. Soft: it only alerts."
    )
    recipients = forms.CharField(
        label="Also alert", required=False, help_text="E-mail addresses, comma-separated; the team's leads always are."
    )
    webhook_url = forms.CharField(
        label="Webhook URL",
        required=False,
        help_text="Each alert is POSTed there as JSON.",
        widget=forms.TextInput(attrs={"inputmode": "url"}),
    )
    reason = forms.CharField(
        label="Reason",
        required=False,
        help_text="Kept in the quota history.",
        widget=forms.TextInput(attrs={"required": True}),
    )

    #: Offered once a limit below this month's use was refused (``budgets.below_use``): ticked, it is set anyway.
    confirm = forms.BooleanField(label="Yes, set it below what is used", required=False)

    field_order = ["target", *BUDGET_FIELDS, "reason", "confirm"]

    def __init__(
        self, team: Team, projects: list[Project], allowed: list[Project | None], *args: Any, **kwargs: Any
    ) -> None:
        # Ids of its own: the sub-quota form on the same page has a target and a reason too.
        kwargs["auto_id"] = "budget_%s"
        super().__init__(*args, **kwargs)
        self.targets: dict[str, Project | None] = {TEAM_BUDGET: None, **{f"project:{p.pk}": p for p in projects}}
        choices = [(TEAM_BUDGET, f"the team ({team.slug})")] if None in allowed else []
        choices += [(f"project:{p.pk}", f"project {p.name}") for p in allowed if p is not None]
        self.fields["target"].widget.choices = choices

    def clean_target(self) -> Project | None:
        value = self.cleaned_data["target"]
        if value not in self.targets:
            raise forms.ValidationError("Choose the team or one of its projects.")
        return self.targets[value]


class CohortQuotaForm(LimitsForm):
    cohort = forms.ChoiceField(label="Cohort")

    field_order = ["cohort", "flavor", "resource", "nominal", "borrowing_limit", "lending_limit", "reason"]

    def __init__(self, organization: Organization, user: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(organization, *args, **kwargs)
        self.cohorts = {str(c.pk): c for c in visible_cohorts(organization, user)}
        self.fields["cohort"].choices = [(pk, c.name) for pk, c in self.cohorts.items()]  # type: ignore[attr-defined]


class CohortForm(forms.Form):
    name = forms.CharField(label="Name", max_length=80)
    parent = forms.ChoiceField(label="Inside", required=False)
    reason = forms.CharField(label="Reason", max_length=MAX_REASON, help_text="Kept in the quota history.")

    def __init__(self, organization: Organization, user: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cohorts = {str(c.pk): c for c in visible_cohorts(organization, user)}
        self.fields["parent"].choices = [("", "— a root of the tree —")] + [  # type: ignore[attr-defined]
            (pk, c.name) for pk, c in self.cohorts.items()
        ]


class FairShareForm(forms.Form):
    """How fair sharing remembers (docs/scheduling.md §Memory: recent use counts): the half-life in days."""

    half_life_days = forms.DecimalField(
        label="Half-life (days)",
        min_value=Decimal("0.0417"),
        max_value=365,
        decimal_places=4,
        help_text="After this long an hour of use counts half (an hour to a year).",
    )
    usage_weight = forms.FloatField(
        label="Weight of recent use",
        min_value=0,
        max_value=10,
        help_text="How much recent use beyond a queue's fair part adds to its share; 0: shares forget.",
    )
    reason = forms.CharField(label="Reason", max_length=MAX_REASON, help_text="Kept in the quota history.")


def visible_cohorts(organization: Organization, user: Any) -> list[Cohort]:
    return list(Cohort.objects.for_user(user, Action.VIEW).filter(organization=organization).order_by("name"))


class CapacityRequestForm(forms.Form):
    """A lead's request for capacity (docs/scheduling.md §Bookings): a reservation for a window, or more quota."""

    kind = forms.ChoiceField(
        label="What", choices=[("reservation", "A reservation for a window"), ("quota", "More quota")]
    )
    flavor = forms.ChoiceField(label="Accelerator type")
    accelerators = forms.IntegerField(label="Accelerators", min_value=1)
    starts_at = forms.DateTimeField(
        label="From (UTC)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="More quota: empty is now.",
    )
    ends_at = forms.DateTimeField(
        label="Until (UTC)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="More quota: empty is for good.",
    )
    reason = forms.CharField(label="What it is for", max_length=MAX_REASON, help_text="The admin who decides reads it.")

    def __init__(self, organization: Organization, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = (
            AcceleratorType.objects.filter(organization=organization).order_by("name").values_list("name", flat=True)
        )
        flavor = self.fields["flavor"]
        assert isinstance(flavor, forms.ChoiceField)
        flavor.choices = [(n, n) for n in names]


class CapacityDecisionForm(forms.Form):
    """An admin's decision on a capacity request, or a lead's withdrawal: a reason, always."""

    reason = forms.CharField(label="Why", max_length=MAX_REASON)
    cluster = forms.CharField(label="Cluster to book it on (empty: where it fits best)", required=False)

    def __init__(self, *args: Any, books: bool = False, **kwargs: Any) -> None:
        """``books``: approving a reservation, whose cluster may be named; else there is no cluster to name."""
        super().__init__(*args, **kwargs)
        if not books:
            del self.fields["cluster"]
