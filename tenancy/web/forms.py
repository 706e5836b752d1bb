"""Forms of the portal's pages. They validate shape; the actions validate meaning and permission."""

from __future__ import annotations

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from tenancy.actions import MAX_TOKEN_DAYS
from tenancy.models import ServiceAccount, Team
from tenancy.scoping import Role

TEAM_ROLE_CHOICES = [(Role.RESEARCHER.value, Role.RESEARCHER.label), (Role.LEAD.value, Role.LEAD.label)]


class LoginForm(AuthenticationForm):
    pass


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=120)
    slug = forms.SlugField(max_length=60, required=False, help_text="Left empty, it is made from the name.")
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=2000)


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=TEAM_ROLE_CHOICES)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=TEAM_ROLE_CHOICES)
    reason = forms.CharField(max_length=2000, required=False)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="Where the token is used, e.g. 'laptop CLI'.")
    expires_in_days = forms.IntegerField(min_value=1, max_value=MAX_TOKEN_DAYS, initial=90)


class ServiceAccountForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="What uses it, e.g. 'nightly CI' or 'on-call bot'.")
    scope = forms.ChoiceField(
        choices=ServiceAccount.Scope.choices,
        help_text="Read-only: reads only. Submit jobs: reads, submits and cancels jobs. Team admin: as a lead.",
    )
    expires_in_days = forms.IntegerField(min_value=1, max_value=MAX_TOKEN_DAYS, initial=90)


class GroupMappingForm(forms.Form):
    group = forms.CharField(max_length=200, help_text="Exactly as the identity provider's groups claim names it.")
    role = forms.ChoiceField(choices=Role.choices)
    team = forms.ModelChoiceField(
        queryset=Team.objects.none(), required=False, help_text="For a researcher or a lead; empty otherwise."
    )

    def __init__(self, *args: object, teams: object = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if teams is not None:
            self.fields["team"].queryset = teams  # type: ignore[attr-defined]
