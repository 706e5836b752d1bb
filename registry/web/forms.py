"""The publish form: which team and model (an existing one, or a new one by that name), the version's name,
its metrics (JSON) and notes; an upload when no job is the source. The checks are the actions'."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from registry.actions import MAX_NOTES, MAX_VERSION
from tenancy.models import Team


class PublishForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    model = forms.CharField(
        label="Model",
        max_length=100,
        widget=forms.TextInput(attrs={"list": "existing-models", "autocomplete": "off"}),
        help_text="An existing model of the team, or a new one by this name (lower-case letters, digits, - and _).",
    )
    version = forms.CharField(required=False, max_length=MAX_VERSION, help_text="Empty: the next number (1, 2, 3…).")
    metrics = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": '{"accuracy": 0.93}'}),
        help_text="Evaluation results: a JSON object of names to numbers.",
    )
    notes = forms.CharField(required=False, max_length=MAX_NOTES, widget=forms.Textarea(attrs={"rows": 3}))
    file = forms.FileField(required=False, help_text="The artifact's bytes.")

    def __init__(self, *args: Any, teams: list[Team], upload: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        team_field = self.fields["team"]
        assert isinstance(team_field, forms.ModelChoiceField)
        team_field.queryset = Team.objects.filter(pk__in=[t.pk for t in teams]).order_by("name")
        if upload:
            self.fields["file"].required = True
        else:
            del self.fields["file"]

    def clean_metrics(self) -> Any:
        text = self.cleaned_data.get("metrics") or ""
        if not text.strip():
            return {}
        try:
            return json.loads(text)
        except ValueError:
            raise forms.ValidationError('Not JSON: give an object such as {"accuracy": 0.93}.') from None
