"""What people do in the model registry: create a model, publish a version of it (from an upload, or from a
finished job's latest checkpoint), delete a model. One transaction each, authorized by the policy
(``model.create``, ``model.publish``, ``model.delete``), validated (a ``ValidationError`` naming every bad
field, nothing kept: no row and no bytes), audited. The web form, the API and ``qm model`` all come here.

Bytes are copied into the artifact store (``registry.artifacts``) before the transaction that records the
version: a large upload holds no lock while it streams. Bytes left behind by a refused publication (a
checksum that does not match, a version name taken meanwhile) are removed unless another version of the
organization holds the same bytes (the store keeps identical bytes once). docs/models.md says what a version is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from registry import artifacts
from registry.models import Model, ModelVersion
from scheduler.models import Checkpoint, Job
from scheduler.states import FINAL
from tenancy import policy
from tenancy.actions import audit
from tenancy.models import Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

MAX_NAME = 100
MAX_VERSION = 64
MAX_NOTES = 10_000
MAX_DESCRIPTION = 2_000
MAX_METRICS = 100
#: A version's name: letters, digits and ``.`` ``_`` ``+`` ``-``, starting with a letter or digit ("3", "v1.2.0").
VERSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Publication:
    """What a publication says of the version, whatever its source: its name ("" for the next integer), its
    evaluation results, notes, and (optional) the checksum and size the caller expects."""

    version: str = ""
    metrics: Any = field(default_factory=dict)
    notes: str = ""
    sha256: str = ""
    size_bytes: int | None = None


# --- models -------------------------------------------------------------------------------------------------


def teams_for_models(actor: User) -> list[Team]:
    """Teams ``actor`` may create models in: their own (researcher, lead), all of an organization they admin."""
    teams = policy.permitted(actor, "model.create", Team.objects.select_related("organization"))
    return list(teams.distinct().order_by("name"))


def _model_errors(team: Team, name: str, description: str) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not name:
        errors["name"] = "Give the model a name."
    elif len(name) > MAX_NAME or not MODEL_NAME.fullmatch(name):
        errors["name"] = (
            f"A model's name is lower-case letters, digits, - and _ (at most {MAX_NAME}), starting with a letter "
            "or digit."
        )
    elif Model.objects.filter(team=team, name=name).exists():
        errors["name"] = f"Team {team} already has a model named {name}."
    if len(description) > MAX_DESCRIPTION:
        errors["description"] = f"At most {MAX_DESCRIPTION} characters."
    return errors


def create_model(
    actor: User, team: Team, name: str, description: str = "", *, http: HttpRequest | None = None
) -> Model:
    """A new model of ``team`` (its researchers and leads, the organization's admins)."""
    policy.require(actor, "model.create", team)
    name, description = (name or "").strip(), (description or "").strip()
    if errors := _model_errors(team, name, description):
        raise ValidationError(errors)
    try:
        with transaction.atomic():
            model = Model.objects.create(
                team=team, name=name, description=description, created_at=timezone.now(), created_by=actor
            )
            audit.record(
                "model.created",
                actor=actor,
                target=model,
                organization=team.organization,
                changes={"team": team.slug, "name": name},
                request=http,
            )
    except IntegrityError:  # created meanwhile by somebody else
        raise ValidationError({"name": f"Team {team} already has a model named {name}."}) from None
    return model


def model_for_publishing(actor: User, team: Team, name: str, *, http: HttpRequest | None = None) -> Model:
    """``team``'s model named ``name``, created first when it has none (the publish form's "existing or new")."""
    found: Model | None = Model.objects.filter(team=team, name=(name or "").strip()).first()
    if found is not None:
        return found
    return create_model(actor, team, name, http=http)


def publish_to_named(
    actor: User,
    team: Team,
    name: str,
    what: Publication,
    *,
    job: Job | None = None,
    upload: BinaryIO | None = None,
    filename: str = "",
    http: HttpRequest | None = None,
) -> ModelVersion:
    """``publish`` to ``team``'s model ``name`` (made if new): all or nothing (a refused version leaves no new
    model behind)."""
    with transaction.atomic():
        model = model_for_publishing(actor, team, name, http=http)
        return publish(actor, model, what, job=job, upload=upload, filename=filename, http=http)


def publish(
    actor: User,
    model: Model,
    what: Publication,
    *,
    job: Job | None = None,
    upload: BinaryIO | None = None,
    filename: str = "",
    http: HttpRequest | None = None,
) -> ModelVersion:
    """A version of ``model``: the bytes of ``upload`` (``job``, if given, recorded as where they came from), or
    else ``job``'s latest checkpoint."""
    if upload is not None:
        return publish_upload(actor, model, upload, filename, what, job=job, http=http)
    if job is None:
        raise ValidationError({"file": "Upload the artifact, or publish from a job."})
    return publish_from_job(actor, model, job, what, http=http)


def delete_model(actor: User, model: Model, *, http: HttpRequest | None = None) -> None:
    """Delete ``model`` and its versions (its team's leads, admins); bytes no other version holds go too."""
    policy.require(actor, "model.delete", model)
    org_id = model.team.organization_id
    with transaction.atomic():
        locked = Model.objects.select_for_update().get(pk=model.pk)
        gone = list(ModelVersion.objects.filter(model=locked, stored=True).values_list("sha256", flat=True))
        audit.record(
            "model.deleted",
            actor=actor,
            target=locked,
            organization=model.team.organization,
            changes={"name": locked.name, "versions": locked.versions.count()},
            request=http,
        )
        locked.delete()

        def forget_bytes() -> None:
            for sha256 in set(gone):
                _forget(org_id, sha256)

        transaction.on_commit(forget_bytes)


# --- versions -----------------------------------------------------------------------------------------------


def metrics_errors(metrics: Any) -> str | None:
    """What is wrong with ``metrics`` (a JSON object of names to finite numbers), or None."""
    if not isinstance(metrics, Mapping):
        return 'Give a JSON object of names to numbers, e.g. {"accuracy": 0.93}.'
    if len(metrics) > MAX_METRICS:
        return f"At most {MAX_METRICS} metrics."
    for name, value in metrics.items():
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            return f"A metric's name is text of 1 to {MAX_NAME} characters."
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return f"Metric {name!r} is not a number: give a finite number."
    return None


def _publication_errors(model: Model, what: Publication) -> dict[str, str]:
    errors: dict[str, str] = {}
    if what.version:
        if len(what.version) > MAX_VERSION or not VERSION_NAME.fullmatch(what.version):
            errors["version"] = (
                f"A version is letters, digits, '.', '_', '+' and '-' (at most {MAX_VERSION}), starting with a "
                "letter or digit; leave it out for the next number."
            )
        elif ModelVersion.objects.filter(model=model, version=what.version).exists():
            errors["version"] = f"Model {model.name} already has a version {what.version}."
    if (problem := metrics_errors(what.metrics)) is not None:
        errors["metrics"] = problem
    if len(what.notes) > MAX_NOTES:
        errors["notes"] = f"At most {MAX_NOTES} characters."
    if what.sha256 and not SHA256.fullmatch(what.sha256):
        errors["sha256"] = "A SHA-256 is 64 lower-case hexadecimal digits."
    if what.size_bytes is not None and what.size_bytes < 0:
        errors["size_bytes"] = "A size is a number of bytes, 0 or more."
    return errors


def _normalized(what: Publication) -> Publication:
    return Publication(
        version=(what.version or "").strip(),
        metrics=what.metrics if what.metrics is not None else {},
        notes=(what.notes or "").strip(),
        sha256=(what.sha256 or "").strip().lower(),
        size_bytes=what.size_bytes,
    )


def _store(model: Model, stream: BinaryIO, what: Publication, field_name: str) -> tuple[int, str]:
    """Copy ``stream`` into the store; refuse (keeping nothing) a size or checksum other than the caller's."""
    org_id = model.team.organization_id
    try:
        size, sha256 = artifacts.store(org_id, stream)
    except artifacts.TooLarge as error:
        raise ValidationError({field_name: str(error)}) from None
    errors = {}
    if what.sha256 and what.sha256 != sha256:
        errors["sha256"] = f"The artifact's SHA-256 is {sha256}, not the {what.sha256} given: nothing was kept."
    if what.size_bytes is not None and what.size_bytes != size:
        errors["size_bytes"] = f"The artifact is {size} bytes, not the {what.size_bytes} given: nothing was kept."
    if errors:
        _forget(org_id, sha256)
        raise ValidationError(errors)
    return size, sha256


def _forget(org_id: int, sha256: str) -> None:
    """Remove stored bytes that no stored version of the organization holds (any more)."""
    held = ModelVersion.objects.filter(model__team__organization=org_id, sha256=sha256, stored=True).exists()
    if not held:
        (artifacts.root() / str(org_id) / sha256).unlink(missing_ok=True)


def _next_version(model: Model) -> str:
    """One more than the highest integer version of ``model`` (its versions named otherwise do not count)."""
    names = ModelVersion.objects.filter(model=model, version__regex=r"^[0-9]{1,18}$").values_list("version", flat=True)
    return str(max((int(n) for n in names), default=0) + 1)


def _record(
    actor: User,
    model: Model,
    what: Publication,
    *,
    uri: str,
    size: int,
    sha256: str,
    stored: bool,
    job: Job | None = None,
    checkpoint: str = "",
    http: HttpRequest | None = None,
) -> ModelVersion:
    """The version's row and its audit entry, in one transaction under the model's lock (so two publications
    never take the same next number); bytes already stored are forgotten if it is refused."""
    try:
        with transaction.atomic():
            Model.objects.select_for_update().filter(pk=model.pk).first()
            name = what.version or _next_version(model)
            if ModelVersion.objects.filter(model=model, version=name).exists():
                raise ValidationError({"version": f"Model {model.name} already has a version {name}."})
            version = ModelVersion.objects.create(
                model=model,
                version=name,
                artifact_uri=uri[:500],
                size_bytes=size,
                sha256=sha256,
                stored=stored,
                source_job=job,
                source_checkpoint=checkpoint[:500],
                published_by=actor,
                published_at=timezone.now(),
                metrics=dict(what.metrics),
                notes=what.notes,
            )
            audit.record(
                "model.version_published",
                actor=actor,
                target=version,
                organization=model.team.organization,
                changes={
                    "model": model.name,
                    "version": name,
                    "sha256": sha256,
                    "size_bytes": size,
                    "stored": stored,
                    "source_job": job.pk if job else None,
                    "source_checkpoint": checkpoint,
                },
                request=http,
            )
    except (ValidationError, IntegrityError) as error:
        if stored:
            _forget(model.team.organization_id, sha256)
        if isinstance(error, IntegrityError):
            raise ValidationError({"version": f"Model {model.name} already has that version."}) from None
        raise
    return version


def publish_upload(
    actor: User,
    model: Model,
    stream: BinaryIO,
    filename: str,
    what: Publication,
    *,
    job: Job | None = None,
    http: HttpRequest | None = None,
) -> ModelVersion:
    """A version of ``model`` whose artifact is the bytes of ``stream`` (an uploaded file), kept in the store;
    ``job``, if given, is recorded as where they came from (a job of the model's team, in any state)."""
    policy.require(actor, "model.publish", model)
    what = _normalized(what)
    errors = _publication_errors(model, what)
    if job is not None and job.team_id != model.team_id:
        errors["job"] = f"Job #{job.pk} is not a job of team {model.team}, whose model this is."
    if errors:
        raise ValidationError(errors)
    size, sha256 = _store(model, stream, what, "file")
    name = Path(filename or "artifact").name[:200]
    uri = f"upload:{name}"
    return _record(actor, model, what, uri=uri, size=size, sha256=sha256, stored=True, job=job, http=http)


def latest_checkpoint(job: Job) -> Checkpoint | None:
    return Checkpoint.objects.filter(job=job).order_by("-reported_at", "-pk").first()


def importable(location: str, team: Team) -> Path | None:
    """The file ``location`` names, when it is a regular file in ``team``'s own part of an import root,
    ``<root>/<organization>/<team>/`` (after following links: a link out of it does not count); else None.
    An import root is shared by every team, and a job reports whatever location it likes: a team publishes the
    bytes of its own files only."""
    text = location.removeprefix("file://") if location.startswith("file:///") else location
    if not text.startswith("/"):
        return None
    try:
        path = Path(text).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    areas = [(Path(root) / team.organization.slug / team.slug).resolve() for root in settings.ARTIFACT_IMPORT_ROOTS]
    if not path.is_file() or not any(path.is_relative_to(area) for area in areas):
        return None
    return path


def job_errors(model: Model, job: Job) -> tuple[Checkpoint | None, dict[str, str]]:
    """The job's checkpoint to publish, and what stops ``job`` being a source of ``model``'s versions."""
    if job.team_id != model.team_id:
        return None, {"job": f"Job #{job.pk} is not a job of team {model.team}, whose model this is."}
    if job.state not in FINAL:
        state = job.get_state_display().lower()
        return None, {"job": f"Job #{job.pk} is {state}: publish from a job that has ended."}
    checkpoint = latest_checkpoint(job)
    if checkpoint is None:
        return None, {"job": f"Job #{job.pk} reported no checkpoint: upload the artifact as a file instead."}
    return checkpoint, {}


def publish_from_job(
    actor: User, model: Model, job: Job, what: Publication, *, http: HttpRequest | None = None
) -> ModelVersion:
    """A version of ``model`` from ``job``'s latest checkpoint (the job ended: succeeded, or failed or was
    cancelled after a checkpoint). A checkpoint the portal can read in the team's own part of an import root
    (``importable``) is copied into the store; any other is recorded by its location, with the size and checksum
    the caller gives (not stored: no device or replica can load it)."""
    policy.require(actor, "model.publish", model)
    what = _normalized(what)
    errors = _publication_errors(model, what)
    checkpoint, problems = job_errors(model, job)
    errors.update(problems)
    if errors:
        raise ValidationError(errors)
    assert checkpoint is not None
    source = importable(checkpoint.location, model.team)
    label = f"{checkpoint.location}" + (f" (step {checkpoint.step})" if checkpoint.step is not None else "")
    if source is None:
        size, sha256, stored = what.size_bytes or 0, what.sha256, False
    else:
        try:
            with source.open("rb") as stream:
                size, sha256 = _store(model, stream, what, "job")
        except OSError as error:
            raise ValidationError({"job": f"Cannot read {checkpoint.location}: {error.strerror}."}) from None
        stored = True
    return _record(
        actor,
        model,
        what,
        uri=checkpoint.location,
        size=size,
        sha256=sha256,
        stored=stored,
        job=job,
        checkpoint=label,
        http=http,
    )
