"""What the placement loop does when governance changes (``governance.actions.changed``).

Pages read the snapshot kept for previews: it is dropped at once (the changing request's own reads see the
change) and again at the commit (a read by another request in between kept the old one); then the loop is woken
to place under the new rules.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.dispatch import receiver

from governance.actions import changed
from scheduler.actions import wake_loop
from scheduler.placement import feasibility
from tenancy.models import Organization


@receiver(changed)
def _governance_changed(sender: Any, organization: Organization, **kwargs: Any) -> None:
    feasibility.forget(organization)
    transaction.on_commit(lambda: feasibility.forget(organization))
    transaction.on_commit(wake_loop)
