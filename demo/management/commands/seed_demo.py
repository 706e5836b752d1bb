from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from demo.billing import seed_history
from demo.fleet import seed_demo_fleet, sync_demo_fleet
from demo.jobs import seed_demo_jobs
from demo.tenancy import USERS, seed_demo


class Command(BaseCommand):
    help = "Create the demo organization, teams and users (idempotent; refused in production)."

    def handle(self, *args: Any, **options: Any) -> None:
        org = seed_demo()
        clusters = seed_demo_fleet(org)
        sync_demo_fleet(org)
        jobs = seed_demo_jobs(org)
        history = seed_history(org, days=settings.DEMO_HISTORY_DAYS) if settings.DEMO_HISTORY_DAYS else 0
        self.stdout.write(f"Demo fleet: {', '.join(c.name for c in clusters)}; {len(jobs)} demo jobs")
        if history:
            self.stdout.write(f"Billing history: {history} past jobs, metered, with the price book and overhead")
        self.stdout.write(f"Demo organization {org.name!r} ready with users: {', '.join(u.username for u in USERS)}")
