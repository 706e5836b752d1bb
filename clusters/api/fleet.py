"""The fleet API, for on-call tooling: clusters and nodes as their last sync found them; admins cordon, drain
and resume nodes and plan and cancel maintenance windows.

Thin, like the rest of the API: rows come from ``for_user`` (another organization's cluster, node or window is
a 404 for every verb, and absent from lists); changes go through ``clusters.actions``, which audit them.
Who may change is asked (``tenancy.policy``) before the body is judged, so a member who may only look gets 403
whatever they sent; bad input is a 400 naming the field, and changes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count, Prefetch, QuerySet, Sum
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from clusters import actions
from clusters.api import serializers as s
from clusters.models import OPEN_DRAINS, Cluster, Drain, MaintenanceWindow, Node
from clusters.web.filters import FleetNodeFilter, MaintenanceWindowFilter
from common import params
from common.api.answered import Answered
from common.api.errors import error_body
from common.api.parsers import JSONParser
from common.api.serializers import find
from tenancy import policy
from tenancy.rest import TenantViewSet
from tenancy.scoping import Action

ERROR = OpenApiResponse(description="`{error: {status, code, message, fields}}`")


class ClusterViewSet(Answered, TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """The clusters of the organizations the user belongs to: what each runs, its sync status, its nodes by
    state and its accelerators. Never its credentials; its options only to its admins."""

    model = Cluster
    serializer_class = s.ClusterSerializer

    def get_queryset(self) -> QuerySet[Cluster]:
        return super().get_queryset().select_related("organization").order_by("organization__name", "name", "pk")

    def _answer(self, clusters: list[Cluster], many: bool) -> Any:
        """The clusters with their node counts and accelerator totals, in one grouped query for all of them."""
        by_state: dict[int, dict[str, int]] = defaultdict(dict)
        accelerators: dict[int, dict[str, int]] = defaultdict(lambda: {"total": 0, "allocatable": 0, "used": 0})
        grouped = (
            Node.objects.filter(cluster__in=[c.pk for c in clusters], present=True)
            .order_by()
            .values_list("cluster_id", "state")
            .annotate(
                nodes=Count("pk"),
                total=Sum("accelerators"),
                allocatable=Sum("accelerators_allocatable"),
                used=Sum("accelerators_used"),
            )
        )
        for cluster_id, state, nodes, total, allocatable, used in grouped:
            by_state[cluster_id][state] = nodes
            sums = accelerators[cluster_id]
            sums["total"] += total or 0
            sums["allocatable"] += allocatable or 0
            sums["used"] += used or 0
        administered = {c.pk for c in clusters if policy.can(self.actor, "cluster.change", c)}
        context = {
            **self.get_serializer_context(),
            "by_state": by_state,
            "accelerators": accelerators,
            "administered": administered,
        }
        return s.ClusterSerializer(clusters if many else clusters[0], many=many, context=context).data


NODE_CHANGE = {
    200: s.NodeSerializer,
    400: ERROR,
    403: ERROR,
    404: ERROR,
}


class NodeViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Nodes of the clusters the user sees, each with the drain or cordon that keeps it out of service. Admins
    cordon (no new work; running jobs finish), drain (running jobs are signalled, get their grace to
    checkpoint, then move elsewhere without spending a retry) and resume them."""

    model = Node
    serializer_class = s.NodeSerializer
    filterset_class = FleetNodeFilter
    parser_classes = [JSONParser]

    def get_queryset(self) -> QuerySet[Node]:
        open_drains = Drain.objects.filter(state__in=OPEN_DRAINS).select_related("requested_by")
        return (
            super()
            .get_queryset()
            .select_related("cluster", "accelerator")
            .prefetch_related(Prefetch("drains", queryset=open_drains, to_attr="open_drains"))
            .order_by("cluster__name", "name", "pk")
        )

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # The list's filters only: a node's own endpoints take none.
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    def _change(self, request: Request, form_class: type[Serializer[Any]], change: Callable[..., Any]) -> Response:
        """Apply ``change`` (an action taking the actor, the node, a reason and the form's other fields) to a
        node the user sees (else 404) and may change (else 403, before the body is judged)."""
        node = self.get_object()
        policy.require(self.actor, "node.drain", node, f"Only admins of {node.cluster.organization} change its nodes.")
        form = form_class(data=request.data)
        form.is_valid(raise_exception=True)
        values = dict(form.validated_data)
        change(self.actor, node, values.pop("reason"), http=request._request, **values)
        return Response(s.NodeSerializer(self.get_queryset().get(pk=node.pk)).data)

    @extend_schema(request=s.ReasonSerializer, responses=NODE_CHANGE)
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, pk: str | None = None) -> Response:
        """Admins: no new work lands on the node; jobs running there finish undisturbed."""
        return self._change(request, s.ReasonSerializer, actions.cordon_node)

    @extend_schema(request=s.DrainSerializer, responses=NODE_CHANGE)
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        """Admins: no new work; each job running there is signalled, gets ``grace_seconds`` (else its tier's
        grace) to checkpoint, then is requeued elsewhere without spending a retry. A cordoned node may be
        drained."""
        return self._change(request, s.DrainSerializer, actions.drain_node)

    @extend_schema(request=s.ReasonSerializer, responses=NODE_CHANGE)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        """Admins: put a cordoned, draining or drained node back in service."""
        return self._change(request, s.ReasonSerializer, actions.resume_node)


class MaintenanceWindowViewSet(
    TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin
):
    """Maintenance windows of the clusters the user sees, soonest first. Admins plan one (its nodes, or all of
    the cluster's, are drained ``drain_ahead_minutes`` before it starts and resumed when it ends) and cancel
    one that has not ended (DELETE: the nodes drained for it are resumed)."""

    model = MaintenanceWindow
    serializer_class = s.MaintenanceWindowSerializer
    filterset_class = MaintenanceWindowFilter
    parser_classes = [JSONParser]
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[MaintenanceWindow]:
        return (
            super()
            .get_queryset()
            .select_related("cluster", "created_by")
            .prefetch_related("nodes")
            .order_by("starts_at", "pk")
        )

    def _cluster(self, ref: Any) -> Cluster:
        """The cluster the body names, among those the user sees; one they do not see is named as missing."""
        found = find(Cluster.objects.for_user(self.actor, Action.VIEW), ref)
        if len(found) != 1:
            raise exceptions.ValidationError({"cluster": [f"No cluster {str(ref)[:60]!r}."]})
        cluster: Cluster = found[0]
        return cluster

    def _nodes(self, cluster: Cluster, refs: Iterable[Any]) -> list[Node]:
        refs = list(dict.fromkeys(refs))
        names = [ref for ref in refs if isinstance(ref, str)]
        ids = [params.as_id(ref) for ref in refs if isinstance(ref, int) or params.as_id(ref) is not None]
        found = list(Node.objects.filter(cluster=cluster, name__in=names)) + list(
            Node.objects.filter(cluster=cluster, pk__in=[pk for pk in ids if pk is not None])
        )
        known = {n.name for n in found} | {str(n.pk) for n in found}
        missing = [str(ref) for ref in refs if str(ref) not in known]
        if missing:
            raise exceptions.ValidationError({"nodes": [f"{cluster.slug} has no node {', '.join(missing[:10])}."]})
        return list({n.pk: n for n in found}.values())

    @extend_schema(
        request=s.MaintenancePlanSerializer,
        responses={201: s.MaintenanceWindowSerializer, 400: ERROR, 403: ERROR},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Admins: plan a maintenance window on some nodes of a cluster (all of them when none are named)."""
        visible = Cluster.objects.for_user(self.actor, Action.VIEW)
        if not policy.permitted(self.actor, "maintenance.plan", visible).exists():
            raise PermissionDenied("Only organization admins plan maintenance.")  # before the body is judged
        form = s.MaintenancePlanSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        values = dict(form.validated_data)
        cluster = self._cluster(values["cluster"])
        policy.require(self.actor, "maintenance.plan", cluster)
        nodes = self._nodes(cluster, values.pop("nodes"))
        window = actions.plan_maintenance(
            self.actor,
            cluster,
            starts_at=values["starts_at"],
            ends_at=values["ends_at"],
            reason=values["reason"],
            nodes=nodes,
            drain_ahead_minutes=values["drain_ahead_minutes"],
            http=request._request,
        )
        body = s.MaintenanceWindowSerializer(self.get_queryset().get(pk=window.pk)).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(
        responses={204: None, 403: ERROR, 404: ERROR, 409: OpenApiResponse(description="The window is over.")}
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Admins: cancel a window that has not ended; the nodes drained for it are resumed (a node also taken
        out for another reason stays out)."""
        window = self.get_object()
        try:
            actions.cancel_maintenance(self.actor, window, http=request._request)
        except DjangoValidationError as error:
            if "ends_at" not in getattr(error, "error_dict", {}):
                raise
            messages = error.message_dict["ends_at"]
            body = error_body(409, "conflict", " ".join(messages), {"ends_at": messages})
            return Response(body, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)
