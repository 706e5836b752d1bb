"""Write the Prometheus rules and the Grafana dashboard generated from the SLOs and the metrics
(``observability/rules.py``) into deploy/; a test checks that the committed files are these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from observability import rules

RULES = Path("deploy/prometheus/rules.yml")
DASHBOARD = Path("deploy/grafana/quartermaster.json")


class Command(BaseCommand):
    help = "Write deploy/prometheus/rules.yml and deploy/grafana/quartermaster.json from the SLO definitions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--runbook",
            default=rules.RUNBOOK,
            help="The runbook's URL for the alerts' runbook_url (default: %(default)s).",
        )
        parser.add_argument("--into", default=str(settings.BASE_DIR), help="The directory that holds deploy/.")

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(options["into"])
        for path, text in (
            (RULES, rules.rules_yaml(options["runbook"])),
            (DASHBOARD, rules.dashboard_json()),
        ):
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            self.stdout.write(f"wrote {target}")
