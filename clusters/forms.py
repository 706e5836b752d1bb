"""Forms of the cluster pages. They validate shape; the actions validate meaning and permission."""

from __future__ import annotations

from django import forms

from clusters.actions import MAX_REASON


class ReasonForm(forms.Form):
    """Drain or resume a node: the reason goes to the audit log and to the people whose jobs move."""

    reason = forms.CharField(
        max_length=MAX_REASON,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Shown in the audit log and to the people whose jobs this moves.",
    )
