"""The registry's reads, shared by the pages and the API: a user's models with their latest version and
version count (two queries for a whole list), and a model's versions."""

from __future__ import annotations

from django.db.models import Count, Prefetch, QuerySet

from common.types import AnyUser
from registry.models import Model, ModelVersion
from scheduler.actions.checkpoints import JobToken
from scheduler.models import Attempt, Job
from scheduler.states import PLACED
from tenancy.scoping import Action

NEWEST = ("-published_at", "-pk")


def models_for(user: AnyUser) -> QuerySet[Model]:
    """The models ``user`` may see, each with ``version_count`` and ``latest_version`` (or None)."""
    newest = ModelVersion.objects.select_related("source_job").order_by(*NEWEST)
    found: QuerySet[Model] = (
        Model.objects.for_user(user, Action.VIEW)
        .select_related("team", "created_by")
        .annotate(version_count=Count("versions"))
        .prefetch_related(Prefetch("versions", queryset=newest[:1], to_attr="newest"))
        .order_by("team__name", "name")
    )
    return found


def latest(model: Model) -> ModelVersion | None:
    """The version published last (from ``models_for``'s prefetch)."""
    newest: list[ModelVersion] = getattr(model, "newest", [])
    return newest[0] if newest else None


def versions_of(model: Model) -> QuerySet[ModelVersion]:
    return ModelVersion.objects.filter(model=model).select_related("published_by", "source_job").order_by(*NEWEST)


def versions_for_job(token: JobToken) -> QuerySet[ModelVersion]:
    """The versions a job may fetch with its token: those of its team's models, while the attempt the token
    names runs (an ended attempt's token, or an earlier one's, reaches nothing)."""
    running = Job.objects.filter(
        pk=token.job_id,
        attempt=token.attempt,
        state__in=PLACED,
        attempts__number=token.attempt,
        attempts__outcome=Attempt.Outcome.ACTIVE,
    ).values("team")
    found: QuerySet[ModelVersion] = ModelVersion.objects.filter(model__team__in=running)
    return found
