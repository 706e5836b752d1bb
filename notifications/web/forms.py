"""The notification settings' form: one choice of channels per event, a webhook URL and the hours of waiting.
The same form serves a user's own choices and a team's defaults; ``preferences`` judges what it gives."""

from __future__ import annotations

from typing import Any

from django import forms

from notifications.events import EVENTS, MAX_WAIT_HOURS
from notifications.models import Channel, Preference

#: The choices of one event, as the form offers them, and the channels each stands for.
OFF, EMAIL, WEBHOOK, BOTH = "off", "email", "webhook", "both"
CHANNELS: dict[str, list[str]] = {OFF: [], EMAIL: [Channel.EMAIL], WEBHOOK: [Channel.WEBHOOK], BOTH: sorted(Channel)}
WORDS = {OFF: "Not told", EMAIL: "E-mail", WEBHOOK: "Webhook", BOTH: "E-mail and webhook"}


def word(channels: frozenset[str] | list[str]) -> str:
    """Channels in words: "E-mail and webhook", "Not told"."""
    key = next((k for k, v in CHANNELS.items() if set(v) == set(channels)), OFF)
    return WORDS[key]


class ChoicesForm(forms.Form):
    webhook_url = forms.CharField(
        label="Webhook URL",
        required=False,
        max_length=500,
        help_text='A Slack-compatible incoming webhook ({"text", "blocks"} is POSTed there).',
        widget=forms.URLInput(attrs={"placeholder": "https://hooks.slack.com/services/…"}),
    )
    wait_hours = forms.IntegerField(
        label="Waiting limit (hours)",
        required=False,
        min_value=1,
        max_value=MAX_WAIT_HOURS,
        help_text="Tell when a job is still pending this long after it was submitted.",
    )

    def __init__(self, *args: Any, defaults: dict[str, frozenset[Channel]], default_hours: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        pending = "Tell when a job is still pending this long after it was submitted"
        self.fields["wait_hours"].help_text = f"{pending}; empty: the default ({default_hours})."
        for code, kind in EVENTS.items():
            self.fields[f"event_{code}"] = forms.ChoiceField(
                label=kind.label,
                required=False,
                choices=[("", f"Default: {word(defaults[code])}"), *WORDS.items()],
            )

    @staticmethod
    def initial_from(row: Preference | None) -> dict[str, Any]:
        if row is None:
            return {}
        initial: dict[str, Any] = {"webhook_url": row.webhook_url, "wait_hours": row.wait_hours}
        for code, channels in row.events.items():
            initial[f"event_{code}"] = next((k for k, v in CHANNELS.items() if set(v) == set(channels)), OFF)
        return initial

    def event_fields(self) -> list[forms.BoundField]:
        return [self[f"event_{code}"] for code in EVENTS]

    def choices(self) -> dict[str, Any]:
        """What to give ``preferences.set_own`` or ``set_team_defaults``."""
        data = self.cleaned_data
        events = {code: CHANNELS[data[f"event_{code}"]] for code in EVENTS if data.get(f"event_{code}")}
        return {"events": events, "webhook_url": data["webhook_url"], "wait_hours": data["wait_hours"]}
