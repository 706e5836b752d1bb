"""Upgrading an installation from before the re-layout: governance's models leave the scheduler app without a row
touched (docs/operations.md, "Upgrading to the re-laid-out version").

The test goes back to the schema as it was (scheduler 0006, no governance app), writes rows there through the
historical models, and migrates forward: the same rows are read through the governance models, and the content
types (what permissions and the admin's history hang on) have followed them.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.state import StateApps

BEFORE = [("scheduler", "0006_job_secret_env"), ("governance", None)]
MOVED = ("budget", "budgetalert", "cohort", "memberlimit", "prioritytier", "queue", "quota", "quotachange")

pytestmark = pytest.mark.django_db(transaction=True)


def _migrate(targets: list[tuple[str, str | None]]) -> StateApps:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    # The models as the applied migrations say they are (what a data migration would see).
    loader = MigrationExecutor(connection).loader
    apps: StateApps = loader.project_state(list(loader.applied_migrations or {})).apps
    return apps


def _latest() -> list[tuple[str, str | None]]:
    executor = MigrationExecutor(connection)
    # Every app's: going back to scheduler 0006 unapplies the apps that came after it (notifications, the
    # registry, serving, edge), and the other tests expect their tables.
    return list(executor.loader.graph.leaf_nodes())


@pytest.fixture
def before() -> Iterator[StateApps]:
    latest = _latest()
    yield _migrate(BEFORE)
    _migrate(latest)  # whatever happened, the database ends where the other tests expect it


def test_upgrading_moves_governance_models_to_their_app_without_touching_a_row(before: StateApps) -> None:
    content_type = before.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="governance").delete()
    for model in MOVED:
        content_type.objects.get_or_create(app_label="scheduler", model=model)
    organization = before.get_model("portal", "Organization").objects.create(name="Upgraded lab", slug="upgraded")
    team = before.get_model("portal", "Team").objects.create(organization=organization, name="Vision", slug="vision")
    old_queue = before.get_model("scheduler", "Queue")
    queue, _ = old_queue.objects.get_or_create(team_id=team.pk, project=None, defaults={"name": "vision"})
    tier = before.get_model("scheduler", "PriorityTier").objects.create(
        organization=organization, name="normal", value=100
    )
    tier.teams.add(team)
    flavor = before.get_model("clusters", "AcceleratorType").objects.create(
        organization=organization, name="H100-UPGRADE", memory_gib=80
    )
    before.get_model("scheduler", "Quota").objects.create(
        queue=queue, flavor=flavor, resource="accelerators", nominal=Decimal(16)
    )

    after = _migrate(_latest())

    new_queue = after.get_model("governance", "Queue")
    assert new_queue._meta.db_table == "scheduler_queue"
    moved = new_queue.objects.get(pk=queue.pk)
    assert (moved.name, moved.team_id) == ("vision", team.pk)
    assert after.get_model("governance", "Quota").objects.get(queue_id=queue.pk).nominal == Decimal(16)
    assert list(after.get_model("governance", "PriorityTier").objects.get(pk=tier.pk).teams.all()) == [
        after.get_model("portal", "Team").objects.get(pk=team.pk)
    ]
    labels = dict(
        after.get_model("contenttypes", "ContentType").objects.filter(model__in=MOVED).values_list("model", "app_label")
    )
    assert labels == dict.fromkeys(MOVED, "governance")
