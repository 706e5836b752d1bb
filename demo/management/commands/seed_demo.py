from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils import timezone

from demo.background import seed_researchers
from demo.billing import close_history, seed_capacity_plan, seed_history
from demo.devices import enrolment_tokens
from demo.fleet import seed_demo_fleet, seed_elastic_pool, sync_demo_fleet
from demo.inference import seed_inference
from demo.jobs import seed_demo_jobs
from demo.tenancy import USERS, seed_demo
from demo.utilization import seed_history_samples

#: Hours of the history's end that get GPU samples (a probe's minute readings), as if probes ran then.
SAMPLED_HOURS = 6


class Command(BaseCommand):
    help = "Create the demo organization, teams and users (idempotent; refused in production)."

    def handle(self, *args: Any, **options: Any) -> None:
        org = seed_demo()
        clusters = seed_demo_fleet(org)
        sync_demo_fleet(org)
        seed_elastic_pool(org)
        jobs = seed_demo_jobs(org)
        seed_researchers(org)  # who submits the background work (``manage.py demo_background``)
        now = timezone.now()
        history = seed_history(org, days=settings.DEMO_HISTORY_DAYS, now=now) if settings.DEMO_HISTORY_DAYS else 0
        if history:
            seed_history_samples(org, now - timedelta(hours=SAMPLED_HOURS), now)
        closed = close_history(org, now) if history else []
        planned = seed_capacity_plan(org, now.date())
        # After the history: the model's versions are published from robotics' finished jobs.
        service = seed_inference(org)
        tokens = enrolment_tokens(org)  # for the agents of ``manage.py demo_devices``
        self.stdout.write(f"Demo fleet: {', '.join(c.name for c in clusters)}; {len(jobs)} demo jobs")
        if history:
            self.stdout.write(
                f"Billing history: {history} past jobs, metered, with the price book and overhead; "
                f"GPU samples for the last {SAMPLED_HOURS} hours"
                + (f"; closed months: {', '.join(closed)}" if closed else "")
            )
        if planned:
            self.stdout.write(f"Capacity plan: {'; '.join(planned)}")
        self.stdout.write(
            f"Service {service.team.slug}/{service.name} (public, {service.min_replicas} to {service.max_replicas} "
            f"replicas); device groups with {len(tokens)} demo devices, {sum(1 for t in tokens.values() if t)} "
            "waiting to enrol"
        )
        self.stdout.write(f"Demo organization {org.name!r} ready with users: {', '.join(u.username for u in USERS)}")
