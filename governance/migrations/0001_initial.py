"""Governance's models, moved from the ``scheduler`` app with their tables (``Meta.db_table``): state only.

The tables were made by scheduler's migrations 0001-0006, so this one creates nothing in the database; it
tells Django the models are governance's now (scheduler's 0007 forgets them there), and renames their content
types so permissions and admin history follow them. An existing installation upgrades with ``migrate``: no
row is touched but those content types.
"""

from typing import Any

import django.core.validators
import django.db.models.deletion
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


MODELS = ("budget", "budgetalert", "cohort", "memberlimit", "prioritytier", "queue", "quota", "quotachange")


def _move_content_types(apps: Any, schema_editor: Any, source: str, target: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    taken = set(content_type.objects.filter(app_label=target).values_list("model", flat=True))
    content_type.objects.filter(app_label=source, model__in=[m for m in MODELS if m not in taken]).update(
        app_label=target
    )


def rename_content_types(apps: Any, schema_editor: Any) -> None:
    _move_content_types(apps, schema_editor, "scheduler", "governance")


def unrename_content_types(apps: Any, schema_editor: Any) -> None:
    _move_content_types(apps, schema_editor, "governance", "scheduler")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("clusters", "0003_drain_window"),
        ("portal", "0002_identity_provider_and_service_accounts"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("scheduler", "0006_job_secret_env"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(rename_content_types, unrename_content_types),
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Budget",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "accelerator_hours",
                            models.DecimalField(
                                blank=True,
                                decimal_places=3,
                                max_digits=14,
                                null=True,
                                validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                            ),
                        ),
                        (
                            "amount",
                            models.DecimalField(
                                blank=True,
                                decimal_places=2,
                                max_digits=14,
                                null=True,
                                validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                            ),
                        ),
                        (
                            "hard",
                            models.BooleanField(
                                default=False, help_text="Hard: jobs that would pass it wait. Soft: it only alerts."
                            ),
                        ),
                        ("recipients", models.JSONField(blank=True, default=list)),
                        ("webhook_url", models.URLField(blank=True, max_length=500)),
                        ("updated_at", models.DateTimeField()),
                        (
                            "project",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="budgets",
                                to="portal.project",
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="budgets", to="portal.team"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scheduler_budget",
                        "ordering": ["team__name", models.OrderBy(models.F("project__name"), nulls_first=True)],
                    },
                ),
                migrations.CreateModel(
                    name="BudgetAlert",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("period", models.DateField()),
                        (
                            "measure",
                            models.CharField(
                                choices=[("accelerator_hours", "Accelerator-hours"), ("amount", "Money")], max_length=20
                            ),
                        ),
                        (
                            "kind",
                            models.CharField(
                                choices=[
                                    ("50", "50% used"),
                                    ("80", "80% used"),
                                    ("100", "100% used"),
                                    ("forecast", "Forecast over budget"),
                                ],
                                max_length=20,
                            ),
                        ),
                        ("limit", models.DecimalField(decimal_places=3, max_digits=14)),
                        ("spent", models.DecimalField(decimal_places=3, max_digits=14)),
                        ("forecast", models.DecimalField(blank=True, decimal_places=3, max_digits=14, null=True)),
                        ("message", models.TextField()),
                        ("created_at", models.DateTimeField(db_index=True)),
                        ("emailed_at", models.DateTimeField(blank=True, null=True)),
                        ("emailed_to", models.TextField(blank=True)),
                        ("webhook_sent_at", models.DateTimeField(blank=True, null=True)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("last_error", models.TextField(blank=True)),
                        (
                            "budget",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="alerts",
                                to="governance.budget",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scheduler_budgetalert",
                        "ordering": ["-created_at", "-id"],
                    },
                ),
                migrations.CreateModel(
                    name="Cohort",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=80)),
                        (
                            "organization",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="cohorts",
                                to="portal.organization",
                            ),
                        ),
                        (
                            "parent",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="children",
                                to="governance.cohort",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scheduler_cohort",
                        "ordering": ["organization__name", "name"],
                    },
                ),
                migrations.CreateModel(
                    name="MemberLimit",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "accelerators",
                            models.DecimalField(
                                decimal_places=3,
                                max_digits=12,
                                validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="member_limits",
                                to="portal.team",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="member_limits",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scheduler_memberlimit",
                        "ordering": ["team__name", "user__username"],
                    },
                ),
                migrations.CreateModel(
                    name="PriorityTier",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=40)),
                        ("value", models.IntegerField()),
                        (
                            "preemptible",
                            models.BooleanField(default=True, help_text="Whether jobs of this tier may be preempted."),
                        ),
                        (
                            "grace_seconds",
                            models.PositiveIntegerField(
                                default=300,
                                help_text="Time a victim gets to checkpoint.",
                                validators=[django.core.validators.MaxValueValidator(86400)],
                            ),
                        ),
                        ("is_default", models.BooleanField(default=False)),
                        (
                            "organization",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="priority_tiers",
                                to="portal.organization",
                            ),
                        ),
                        ("teams", models.ManyToManyField(blank=True, related_name="priority_tiers", to="portal.team")),
                    ],
                    options={
                        "db_table": "scheduler_prioritytier",
                        "ordering": ["organization__name", "-value"],
                    },
                ),
                migrations.CreateModel(
                    name="Queue",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=80)),
                        ("flavor_order", models.JSONField(blank=True, default=list)),
                        (
                            "within_queue",
                            models.CharField(
                                choices=[
                                    ("never", "Never"),
                                    ("lower_priority", "Lower priority"),
                                    ("lower_or_newer_equal_priority", "Lower, or newer of equal priority"),
                                ],
                                default="lower_priority",
                                max_length=40,
                            ),
                        ),
                        (
                            "reclaim",
                            models.CharField(
                                choices=[
                                    ("never", "Never"),
                                    ("lower_priority", "Borrowed work of lower priority"),
                                    ("any", "Any borrowed work"),
                                    ("fair_sharing", "Fair sharing"),
                                ],
                                default="lower_priority",
                                max_length=20,
                            ),
                        ),
                        (
                            "weight",
                            models.FloatField(default=1.0, validators=[django.core.validators.MinValueValidator(0.01)]),
                        ),
                        (
                            "cohort",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="queues",
                                to="governance.cohort",
                            ),
                        ),
                        (
                            "project",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="queues",
                                to="portal.project",
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT, related_name="queues", to="portal.team"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scheduler_queue",
                        "ordering": ["team__name", "name"],
                    },
                ),
                migrations.CreateModel(
                    name="Quota",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "resource",
                            models.CharField(
                                choices=[
                                    ("accelerator", "Accelerators"),
                                    ("cpu", "CPU cores"),
                                    ("memory", "Memory (GiB)"),
                                ],
                                default="accelerator",
                                max_length=20,
                            ),
                        ),
                        (
                            "nominal",
                            models.DecimalField(
                                decimal_places=3,
                                max_digits=12,
                                validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                            ),
                        ),
                        (
                            "borrowing_limit",
                            models.DecimalField(
                                blank=True,
                                decimal_places=3,
                                max_digits=12,
                                null=True,
                                validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                            ),
                        ),
                        (
                            "lending_limit",
                            models.DecimalField(
                                blank=True,
                                decimal_places=3,
                                max_digits=12,
                                null=True,
                                validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                            ),
                        ),
                        (
                            "cohort",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="quotas",
                                to="governance.cohort",
                            ),
                        ),
                        (
                            "flavor",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="quotas",
                                to="clusters.acceleratortype",
                            ),
                        ),
                        (
                            "queue",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="quotas",
                                to="governance.queue",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scheduler_quota",
                        "ordering": ["pk"],
                    },
                ),
                migrations.CreateModel(
                    name="QuotaChange",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "kind",
                            models.CharField(
                                choices=[
                                    ("quota", "Quota"),
                                    ("policy", "Queue policy"),
                                    ("queue", "Queue"),
                                    ("cohort", "Cohort"),
                                    ("member", "Member limit"),
                                    ("budget", "Budget"),
                                    ("tier", "Priority tier"),
                                ],
                                max_length=20,
                            ),
                        ),
                        ("subject", models.CharField(max_length=200)),
                        ("before", models.JSONField(blank=True, default=dict)),
                        ("after", models.JSONField(blank=True, default=dict)),
                        ("reason", models.TextField()),
                        ("actor_name", models.CharField(max_length=150)),
                        ("created_at", models.DateTimeField(db_index=True)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "cohort",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="changes",
                                to="governance.cohort",
                            ),
                        ),
                        (
                            "organization",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="quota_changes",
                                to="portal.organization",
                            ),
                        ),
                        (
                            "queue",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="changes",
                                to="governance.queue",
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="quota_changes",
                                to="portal.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scheduler_quotachange",
                        "ordering": ["-created_at", "-id"],
                    },
                ),
                migrations.AddConstraint(
                    model_name="budget",
                    constraint=models.UniqueConstraint(fields=("team", "project"), name="budget_one_per_project"),
                ),
                migrations.AddConstraint(
                    model_name="budget",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("project", None)), fields=("team",), name="budget_one_per_team"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="budget",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("accelerator_hours__isnull", False), ("amount__isnull", False), _connector="OR"
                        ),
                        name="budget_limits_something",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="budgetalert",
                    constraint=models.UniqueConstraint(
                        fields=("budget", "period", "measure", "kind", "limit"), name="budget_alert_once_per_period"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="cohort",
                    constraint=models.UniqueConstraint(
                        fields=("organization", "name"), name="cohort_name_unique_in_org"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="memberlimit",
                    constraint=models.UniqueConstraint(fields=("team", "user"), name="member_limit_one_per_member"),
                ),
                migrations.AddConstraint(
                    model_name="prioritytier",
                    constraint=models.UniqueConstraint(fields=("organization", "name"), name="tier_name_unique_in_org"),
                ),
                migrations.AddConstraint(
                    model_name="prioritytier",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("is_default", True)),
                        fields=("organization",),
                        name="tier_one_default_per_org",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queue",
                    constraint=models.UniqueConstraint(fields=("team", "project"), name="queue_one_per_project"),
                ),
                migrations.AddConstraint(
                    model_name="queue",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("project", None)), fields=("team",), name="queue_one_per_team"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="quota",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("cohort", None), ("queue__isnull", False)),
                            models.Q(("cohort__isnull", False), ("queue", None)),
                            _connector="OR",
                        ),
                        name="quota_of_queue_xor_cohort",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="quota",
                    constraint=models.UniqueConstraint(
                        fields=("queue", "flavor", "resource"), name="quota_unique_in_queue"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="quota",
                    constraint=models.UniqueConstraint(
                        fields=("cohort", "flavor", "resource"), name="quota_unique_in_cohort"
                    ),
                ),
                migrations.AddIndex(
                    model_name="quotachange",
                    index=models.Index(fields=["team", "-created_at"], name="scheduler_q_team_id_9509b8_idx"),
                ),
            ],
        ),
    ]
