"""`manage.py probe_token --cluster SLUG --name NAME --by ADMIN`: a token for a cluster's node probes.

Prints the token once; only its hash is stored. ``--by`` names the organization admin issuing it (it is
audited as theirs).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters import actions
from clusters.models import Cluster
from tenancy import policy


class Command(BaseCommand):
    help = "Issue a probe token for a cluster's node probes (printed once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="The cluster's slug.")
        parser.add_argument("--name", required=True, help="What the token is for, e.g. the rack or image.")
        parser.add_argument("--by", required=True, help="Username of the organization admin issuing it.")

    def handle(self, *args: Any, cluster: str, name: str, by: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=by).first()
        if user is None:
            raise CommandError(f"--by: no user {by!r}")
        found = policy.permitted(user, "probe_token.issue", Cluster.objects.filter(slug=cluster)).first()
        if found is None:
            raise CommandError(f"--cluster: no cluster {cluster!r} that {by} administers")
        try:
            _, raw = actions.issue_probe_token(user, found, name)
        except (ValidationError, PermissionDenied) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(raw)
