"""The model registry's API: a team's models (list, create, read, delete), their versions (list, publish, read)
and a stored version's bytes (ranges honoured: ``registry.downloads``).

Thin: models come from ``Model.objects.for_user`` (another team's model is a 404 for every verb, its versions
and bytes too), changes go through ``registry.actions`` (403 where the policy refuses, 400 naming each bad
field with nothing kept). A version is published from a multipart upload (``file``) or from a job's latest
checkpoint (``{"job": id}``, JSON), to a model by its id (``models/{id}/versions/``) or by its team and name
(``models/publish/``, which makes the model with its first version, or neither).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, renderers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api.parsers import JSONParser, MultiPartParser
from common.api.serializers import find
from registry import actions, downloads, queries
from registry.api import serializers as s
from registry.models import Model, ModelVersion
from scheduler.actions.checkpoints import JobToken
from scheduler.authentication import JobTokenAuthentication, JobTokenOrSignedIn
from scheduler.models import Job
from tenancy import policy
from tenancy.authentication import ApiTokenAuthentication
from tenancy.models import Team
from tenancy.rest import SignedInViewSet, TenantViewSet
from tenancy.scopes import TokenScope
from tenancy.scoping import Action

if TYPE_CHECKING:
    from django.contrib.auth.models import User

ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")


class ModelViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin):
    """Models of the teams the user may see, each with its number of versions and the latest one."""

    model = Model
    serializer_class = s.ModelSerializer
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[Model]:
        found = queries.models_for(self.request.user)
        name, team = self.request.query_params.get("name"), self.request.query_params.get("team")
        if name:
            found = found.filter(name=name)
        if team:
            found = found.filter(team__slug=team) if not team.isdigit() else found.filter(team=int(team))
        return found

    @extend_schema(
        parameters=[
            OpenApiParameter("name", str, description="A model's name."),
            OpenApiParameter("team", str, description="A team's slug or id."),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=s.ModelCreateSerializer, responses={201: s.ModelSerializer, 400: ERROR, 403: ERROR})
    def create(self, request: Request) -> Response:
        """Create a model in a team (its researchers and leads, the organization's admins)."""
        form = s.ModelCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        team = self._team(data.get("team"))
        model = actions.create_model(self.actor, team, data["name"], data["description"], http=request._request)
        return Response(s.ModelSerializer(self.get_queryset().get(pk=model.pk)).data, status=status.HTTP_201_CREATED)

    def _team(self, ref: int | str | None) -> Team:
        if ref is None:
            mine = actions.teams_for_models(self.actor)
            if len(mine) == 1:
                return mine[0]
            choices = ", ".join(t.slug for t in mine)
            raise ValidationError({"team": f"Choose a team: {choices}." if mine else "You may create no models."})
        found: list[Team] = find(Team.objects.for_user(self.actor, Action.VIEW).select_related("organization"), ref)
        if len(found) != 1:
            problem = f"No team {ref!r}." if not found else f"Several teams are named {ref!r}: give its id."
            raise ValidationError({"team": problem})
        return found[0]

    @extend_schema(
        request={"multipart/form-data": s.PublishNamedSerializer, "application/json": s.PublishNamedSerializer},
        responses={201: s.VersionSerializer, 400: ERROR, 403: ERROR},
    )
    @action(detail=False, methods=["post"], parser_classes=[JSONParser, MultiPartParser])
    def publish(self, request: Request) -> Response:
        """Publish a version to a team's model by its name, making the model when it is new: all or nothing
        (a refused version leaves no new model behind). The body is a version's (``versions/``) with ``name``
        and ``team``."""
        form = s.PublishNamedSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        team = self._team(data.get("team"))
        what, job = publication(self.actor, data)
        upload = data.get("file")
        version = actions.publish_to_named(
            self.actor,
            team,
            data["name"],
            what,
            job=job,
            upload=upload,
            filename=upload.name if upload is not None else "",
            http=request._request,
        )
        return Response(s.VersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None, 403: ERROR, 404: ERROR})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Delete a model and all its versions (its team's leads, admins)."""
        actions.delete_model(self.actor, self.get_object(), http=request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ModelScoped(SignedInViewSet):
    """A view under ``models/<model_pk>/``: the model, found through ``for_user`` (a 404 if not seen)."""

    def model_of(self) -> Model:
        model: Model = get_object_or_404(
            Model.objects.for_user(self.request.user, Action.VIEW).select_related("team__organization"),
            pk=self.kwargs["model_pk"],
        )
        return model


class VersionViewSet(ModelScoped, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """A model's versions, newest first; publish one from an upload or from a job."""

    serializer_class = s.VersionSerializer
    parser_classes = [JSONParser, MultiPartParser]

    def get_queryset(self) -> QuerySet[ModelVersion]:
        if getattr(self, "swagger_fake_view", False):  # the schema's generator, with no model in the URL
            return ModelVersion.objects.none()
        return queries.versions_of(self.model_of()).select_related("model")

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        wanted = self.request.query_params.get("version")
        return queryset.filter(version=wanted) if wanted else queryset

    @extend_schema(parameters=[OpenApiParameter("version", str, description="A version's name.")])
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request={"multipart/form-data": s.PublishSerializer, "application/json": s.PublishSerializer},
        responses={201: s.VersionSerializer, 400: ERROR, 403: ERROR, 404: ERROR},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Publish a version: upload its bytes as ``file`` (multipart), or name an ended ``job`` whose latest
        checkpoint it is (JSON). Bytes are checked against ``sha256`` when given."""
        model = self.model_of()
        policy.require(self.actor, "model.publish", model)  # said before the body is judged
        form = s.PublishSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        what, job = publication(self.actor, data)
        upload = data.get("file")
        filename = upload.name if upload is not None else ""
        version = actions.publish(
            self.actor, model, what, job=job, upload=upload, filename=filename, http=request._request
        )
        return Response(s.VersionSerializer(version).data, status=status.HTTP_201_CREATED)


def publication(actor: User, data: dict[str, Any]) -> tuple[actions.Publication, Job | None]:
    """What a publish body asks for, and the job it names (one the user may see; 400 naming ``job`` if not)."""
    what = actions.Publication(
        version=data["version"],
        metrics=data["metrics"],
        notes=data["notes"],
        sha256=data["sha256"],
        size_bytes=data["size_bytes"],
    )
    job = None
    if "job" in data:
        job = Job.objects.for_user(actor, Action.VIEW).filter(pk=data["job"]).first()
        if job is None:
            raise ValidationError({"job": f"No job #{data['job']}, or not one you may see."})
    return what, job


class BytesRenderer(renderers.BaseRenderer):
    """Lets a client that accepts only ``application/octet-stream`` ask for an artifact; an error is still the
    API's JSON error."""

    media_type = "application/octet-stream"
    format = "bin"
    charset = None
    render_style = "binary"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        rendered: bytes = renderers.JSONRenderer().render(data)
        return rendered


class ArtifactView(APIView):
    """A stored version's bytes. ``Range: bytes=N-`` resumes a download (206). A running job of the model's
    team may fetch it with its own token (``QM_JOB_TOKEN``): a service replica loading the version it serves."""

    renderer_classes = [renderers.JSONRenderer, BytesRenderer]
    authentication_classes = [JobTokenAuthentication, ApiTokenAuthentication, SessionAuthentication]
    permission_classes = [JobTokenOrSignedIn, TokenScope]

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        """An error is the API's JSON error, whatever the client accepts (``?format=bin`` too)."""
        if isinstance(response, Response):
            request.accepted_renderer = renderers.JSONRenderer()
            request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)

    @extend_schema(
        parameters=[OpenApiParameter("Range", str, OpenApiParameter.HEADER, description="bytes=FIRST-[LAST]")],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            (206, "application/octet-stream"): OpenApiTypes.BINARY,
            404: ERROR,
            416: OpenApiResponse(description="The range starts past the end (`Content-Range: bytes */SIZE`)."),
        },
    )
    def get(self, request: Request, model_pk: int, pk: int) -> HttpResponse | StreamingHttpResponse:
        if isinstance(request.auth, JobToken):  # a job of the model's team, running: a replica loading it
            visible = queries.versions_for_job(request.auth)
        else:
            visible = ModelVersion.objects.for_user(request.user, Action.VIEW)
        version: ModelVersion = get_object_or_404(visible.select_related("model__team"), model=model_pk, pk=pk)
        if not version.stored:
            raise NotFound(
                f"The portal does not hold version {version.version}'s bytes: it is at {version.artifact_uri}."
            )
        return downloads.artifact_response(request._request, version)
