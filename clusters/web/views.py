"""Cluster pages for the admins and on-call: the clusters, one cluster (with its admins' forms: edit, sync
now, plan maintenance, probe tokens; its elastic pools with this month's spend, whose forms are
``clusters.web.elastic``'s), registering a cluster, its live view, one node with its cordon, drain and resume
forms. Thin: every lookup through ``for_user`` (another organization's cluster is a 404),
every change through ``clusters.actions``; an invalid form is answered with 400 and its errors beside
their fields, a user who may see but not change a node gets 403."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Q, Sum
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_cache_control
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_GET, require_POST

from clusters import actions, capabilities, elastic, occupancy
from clusters.backends import kinds
from clusters.live import ALLOCATION_STEPS, MARKED_STATES, UNHEALTHY, live_view
from clusters.models import (
    AcceleratorType,
    Cluster,
    Drain,
    ElasticGrant,
    ElasticPool,
    HealthCheckResult,
    MaintenanceWindow,
    Node,
    ProbeToken,
)
from clusters.web.filters import NodeFilter
from clusters.web.forms import ClusterForm, DrainForm, MaintenanceForm, ProbeTokenForm, ReasonForm
from common.types import AuthenticatedHttpRequest
from common.web.forms import apply_errors
from tenancy import policy
from tenancy.models import Organization
from tenancy.scoping import Action

NODES_PER_PAGE = 50
RECENT_DRAINS = 10
RECENT_GRANTS = 20
HEALTH_HISTORY = 50
#: Option names whose values are never shown, in case a secret was put in the options by mistake
#: (credentials belong in the encrypted credentials, which are never shown at all; the actions refuse
#: such options now, but older rows may hold them).
SECRET_OPTION = actions.SECRET_OPTION


def _visible_cluster(request: AuthenticatedHttpRequest, pk: int) -> Cluster:
    cluster: Cluster = get_object_or_404(Cluster.objects.for_user(request.user, Action.VIEW), pk=pk)
    return cluster


def _visible_node(request: AuthenticatedHttpRequest, pk: int) -> Node:
    scoped = Node.objects.for_user(request.user, Action.VIEW).select_related("cluster", "accelerator")
    node: Node = get_object_or_404(scoped, pk=pk)
    return node


# --- Clusters -------------------------------------------------------------------------------------------


@require_GET
def cluster_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    clusters = list(Cluster.objects.for_user(request.user, Action.VIEW).select_related("organization"))
    # Node counts and accelerators per cluster and state, in one grouped query for all clusters.
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    grouped = (
        Node.objects.for_user(request.user, Action.VIEW)
        .filter(cluster__in=[c.pk for c in clusters], present=True)
        .order_by()
        .values_list("cluster_id", "state")
        .annotate(nodes=Count("pk"), used=Sum("accelerators_used"), total=Sum("accelerators"))
    )
    for cluster_id, state, nodes, used, total in grouped:
        counts[cluster_id][state] = nodes
        totals[cluster_id][0] += nodes
        totals[cluster_id][1] += used or 0
        totals[cluster_id][2] += total or 0
    # Our placements the clusters' reports do not count yet (``clusters/occupancy.py``).
    where = Q(cluster__in=[c.pk for c in clusters], present=True)
    for cluster_id, accelerators in occupancy.beyond_reports(where, "cluster_id").items():
        totals[cluster_id][1] += accelerators
    rows = []
    for cluster in clusters:
        by_state = counts.get(cluster.pk, {})
        nodes, used, total = totals.get(cluster.pk, [0, 0, 0])
        rows.append(
            {
                "cluster": cluster,
                "states": [(state, label, by_state[state]) for state, label in Node.State.choices if state in by_state],
                "nodes": nodes,
                "used": used,
                "total": total,
                "percent": round(100 * used / total) if total else 0,
            }
        )
    return render(request, "clusters/cluster_list.html", {"rows": rows})


def _shown_options(options: Any) -> list[tuple[str, str]]:
    if not isinstance(options, dict):
        return []
    return [
        (str(key), "(hidden)" if SECRET_OPTION.search(str(key)) else str(value))
        for key, value in sorted(options.items())
    ]


def _render_cluster(
    request: AuthenticatedHttpRequest, cluster: Cluster, status: int = 200, **extra: Any
) -> HttpResponse:
    """The cluster page; its admin forms (maintenance, probe tokens) are passed bound when they failed."""
    nodes = (
        Node.objects.for_user(request.user, Action.VIEW)
        .filter(cluster=cluster)
        .select_related("accelerator")
        .order_by("name")
    )
    filterset = NodeFilter(request.GET, queryset=nodes)
    if filterset.is_valid():
        page = Paginator(filterset.qs, NODES_PER_PAGE).get_page(request.GET.get("page"))
        ours = occupancy.held(Q(pk__in=[node.pk for node in page]))
    else:
        status = HTTPStatus.BAD_REQUEST
        page = Paginator(nodes.none(), NODES_PER_PAGE).get_page(1)
        ours = {}
    query = request.GET.copy()
    query.pop("page", None)
    accelerator_types = list(
        AcceleratorType.objects.for_user(request.user, Action.VIEW)
        .filter(node__cluster=cluster, node__present=True)
        .annotate(nodes=Count("node"), total=Sum("node__accelerators"), used=Sum("node__accelerators_used"))
        .order_by("name")
    )
    # Every placement counts, the clusters' reports or ours where more (``clusters/occupancy.py``).
    beyond = occupancy.beyond_reports(Q(cluster=cluster, present=True), "accelerator_id")
    for accelerator_type in accelerator_types:
        accelerator_type.used = (accelerator_type.used or 0) + beyond.get(accelerator_type.pk, 0)
    drains = (
        Drain.objects.for_user(request.user, Action.VIEW)
        .filter(node__cluster=cluster)
        .select_related("node", "requested_by")[:RECENT_DRAINS]
    )
    windows = (
        MaintenanceWindow.objects.for_user(request.user, Action.VIEW)
        .filter(cluster=cluster, ends_at__gt=timezone.now())
        .select_related("created_by")
        .prefetch_related("nodes")
    )
    can_change = policy.can(request.user, "cluster.change", cluster)
    pools = list(
        ElasticPool.objects.for_user(request.user, Action.VIEW).filter(cluster=cluster).select_related("accelerator")
    )
    spent = elastic.spend(pools)
    context = {
        "cluster": cluster,
        # Backend options name server paths (a Slurm log_dir, a mount): for the cluster's admins only, as in the API.
        "options": _shown_options(cluster.options) if can_change else [],
        "runs": capabilities.of(cluster.kind, cluster.options).describe(),
        "accelerator_types": accelerator_types,
        "filter": filterset,
        "page": page,
        "nodes": [(node, occupancy.use_of(node, ours)) for node in page],
        "query": query.urlencode(),
        "drains": drains,
        "windows": windows,
        "can_change": can_change,
        "can_edit": can_change
        and (not kinds.get(cluster.kind).operators_only or policy.can(request.user, "cluster.simulated.set", cluster)),
        "maintenance_form": extra.get("maintenance_form") or MaintenanceForm(auto_id="maintenance_%s"),
        "probe_token_form": extra.get("probe_token_form") or ProbeTokenForm(auto_id="probe_token_%s"),
        # Probe tokens are for admins' eyes only (their Tenancy says so); others get an empty list.
        "probe_tokens": ProbeToken.objects.for_user(request.user, Action.VIEW)
        .filter(cluster=cluster)
        .select_related("created_by"),
        "new_probe_token": extra.get("new_probe_token"),
        "portal_url": request.build_absolute_uri("/").rstrip("/"),
        # Elastic pools with this month's spend, and their latest asks of the cloud, with what they cost
        # (docs/scheduling.md §Elastic pools).
        "pools": [(pool, spent[pool.pk]) for pool in pools],
        "grants": ElasticGrant.objects.for_user(request.user, Action.VIEW)
        .filter(pool__cluster=cluster)
        .select_related("pool")[:RECENT_GRANTS],
    }
    return render(request, "clusters/cluster_detail.html", context, status=status)


@require_GET
def cluster_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _render_cluster(request, _visible_cluster(request, pk))


def _administered_cluster(request: AuthenticatedHttpRequest, pk: int) -> Cluster:
    """A cluster the user sees (else 404) and administers (else 403, before any input is read)."""
    cluster = _visible_cluster(request, pk)
    policy.require(request.user, "cluster.change", cluster)
    return cluster


def cluster_create(request: AuthenticatedHttpRequest) -> HttpResponse:
    organizations = policy.permitted(request.user, "cluster.create", Organization.objects.all())
    if not organizations.exists():
        raise PermissionDenied("Only organization admins register clusters.")
    if request.POST.get("kind") in kinds.KINDS and kinds.get(str(request.POST["kind"])).operators_only:
        policy.require(request.user, "cluster.simulated.set", organizations[0])
    simulated = settings.SIMULATED_CLUSTERS and policy.can(request.user, "cluster.simulated.set", organizations[0])
    form = ClusterForm(request.POST or None, organizations=organizations, simulated=simulated)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                cluster = actions.create_cluster(
                    request.user,
                    form.organization(),
                    credentials=_given(form.credentials()),
                    http=request,
                    **form.settings(),
                )
            except ValidationError as exc:
                form.apply_errors(exc)
            else:
                messages.success(request, f"{cluster.name} is registered; its first sync is queued.")
                return redirect("cluster-detail", pk=cluster.pk)
        status = HTTPStatus.BAD_REQUEST
    return render(request, "clusters/cluster_form.html", {"form": form, "cluster": None}, status=status)


def _given(credentials: dict[str, str] | str | None) -> dict[str, str] | None:
    return credentials if isinstance(credentials, dict) else None


def cluster_edit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    cluster = _administered_cluster(request, pk)
    if kinds.get(cluster.kind).operators_only:
        policy.require(request.user, "cluster.simulated.set", cluster)
    form = ClusterForm(request.POST or None, cluster=cluster)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                actions.update_cluster(
                    request.user, cluster, credentials=form.credentials(), http=request, **form.settings()
                )
            except ValidationError as exc:
                form.apply_errors(exc)
            else:
                messages.success(request, f"{cluster.name} is saved.")
                return redirect("cluster-detail", pk=cluster.pk)
        status = HTTPStatus.BAD_REQUEST
    return render(request, "clusters/cluster_form.html", {"form": form, "cluster": cluster}, status=status)


@require_POST
def cluster_sync(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    cluster = _administered_cluster(request, pk)
    try:
        actions.request_sync(request.user, cluster, http=request)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return _render_cluster(request, cluster, HTTPStatus.BAD_REQUEST)
    messages.success(request, f"A sync of {cluster.name} is queued.")
    return redirect("cluster-detail", pk=cluster.pk)


@require_POST
def cluster_maintenance(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    cluster = _administered_cluster(request, pk)
    form = MaintenanceForm(request.POST, auto_id="maintenance_%s")
    if form.is_valid():
        names = form.cleaned_data["nodes"]
        found = list(Node.objects.for_user(request.user, Action.VIEW).filter(cluster=cluster, name__in=names))
        unknown = sorted(set(names) - {node.name for node in found})
        if unknown:
            form.add_error("nodes", f"{cluster.name} has no node {', '.join(unknown)}.")
        else:
            try:
                actions.plan_maintenance(
                    request.user,
                    cluster,
                    starts_at=form.cleaned_data["starts_at"],
                    ends_at=form.cleaned_data["ends_at"],
                    reason=form.cleaned_data["reason"],
                    nodes=found,
                    drain_ahead_minutes=form.cleaned_data["drain_ahead_minutes"],
                    http=request,
                )
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, "The maintenance window is planned.")
                return redirect("cluster-detail", pk=cluster.pk)
    return _render_cluster(request, cluster, HTTPStatus.BAD_REQUEST, maintenance_form=form)


@require_POST
def probe_token_create(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    cluster = _administered_cluster(request, pk)
    form = ProbeTokenForm(request.POST, auto_id="probe_token_%s")
    if form.is_valid():
        try:
            _, raw = actions.issue_probe_token(request.user, cluster, form.cleaned_data["name"], http=request)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            # Shown this once, in this answer (only its hash is kept); no redirect that would lose it,
            # and no copy of the page kept by a cache.
            response = _render_cluster(request, cluster, new_probe_token=raw)
            patch_cache_control(response, no_store=True)
            return response
    return _render_cluster(request, cluster, HTTPStatus.BAD_REQUEST, probe_token_form=form)


@require_POST
def probe_token_revoke(request: AuthenticatedHttpRequest, pk: int, token_pk: int) -> HttpResponse:
    cluster = _administered_cluster(request, pk)
    token = get_object_or_404(
        policy.permitted(request.user, "probe_token.revoke", ProbeToken.objects.filter(cluster=cluster)), pk=token_pk
    )
    actions.revoke_probe_token(request.user, token, http=request)
    messages.success(request, f"Probe token {token.name} is revoked.")
    return redirect("cluster-detail", pk=cluster.pk)


# --- Live view ------------------------------------------------------------------------------------------


def _live_context(request: AuthenticatedHttpRequest, cluster: Cluster) -> dict[str, Any]:
    # Tiles link to their node as this prefix and the node's id: no reverse() per tile.
    node_url = reverse("node-detail", kwargs={"pk": 0}).removesuffix("0/")
    return {
        "cluster": cluster,
        "live": live_view(request.user, cluster, node_url),
        "now": timezone.now(),
    }


@require_GET
def cluster_live(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    cluster = _visible_cluster(request, pk)
    context = _live_context(request, cluster)
    context["allocation_steps"] = ALLOCATION_STEPS
    context["marks"] = [(state, Node.State(state).label) for state in MARKED_STATES]
    context["unhealthy_mark"] = UNHEALTHY
    return render(request, "clusters/cluster_live.html", context)


@require_GET
@gzip_page
def cluster_live_tiles(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    """The live view's tiles alone: what the page polls (htmx swaps it in place). Compressed, since it
    is polled every few seconds and 10,000 tiles are about 1.2 MB of markup (~100 kB gzipped, a few ms to
    compress); it holds no CSRF token or echoed input for a compression attack to guess at."""
    cluster = _visible_cluster(request, pk)
    return render(request, "clusters/_live_tiles.html", _live_context(request, cluster))


# --- Nodes ----------------------------------------------------------------------------------------------


def _render_node(request: AuthenticatedHttpRequest, node: Node, status: int = 200, **forms: Any) -> HttpResponse:
    context = {
        "node": node,
        "used": occupancy.use_of(node, occupancy.held(Q(pk=node.pk))),
        "cluster": node.cluster,
        "levels": [(level, node.topology.get(level, "")) for level in node.cluster.levels or []],
        "health": HealthCheckResult.objects.for_user(request.user, Action.VIEW).filter(node=node)[:HEALTH_HISTORY],
        "drains": Drain.objects.for_user(request.user, Action.VIEW).filter(node=node).select_related("requested_by"),
        "can_change": policy.can(request.user, "node.drain", node),
        # A form with errors is shown whatever the state, so its errors are seen.
        "may_cordon": "cordon_form" in forms or node.state == Node.State.SCHEDULABLE,
        "may_drain": "drain_form" in forms or node.state not in (Node.State.DRAINING, Node.State.DRAINED),
        "may_resume": "resume_form" in forms
        or node.state in (Node.State.CORDONED, Node.State.DRAINING, Node.State.DRAINED),
        "cordon_form": forms.get("cordon_form") or ReasonForm(auto_id="cordon_%s"),
        "drain_form": forms.get("drain_form") or DrainForm(auto_id="drain_%s"),
        "resume_form": forms.get("resume_form") or ReasonForm(auto_id="resume_%s"),
    }
    return render(request, "clusters/node_detail.html", context, status=status)


@require_GET
def node_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    return _render_node(request, _visible_node(request, pk))


def _change_node(
    request: AuthenticatedHttpRequest,
    pk: int,
    form_name: str,
    act: Callable[[Node, dict[str, Any]], object],
    done: Callable[[Node], str],
    form_class: type[ReasonForm] = ReasonForm,
) -> HttpResponse:
    """A cordon, drain or resume form posted: authorized before the form is read, the action called with the
    form's values, the node page again with the form's errors (400) when it refuses."""
    node = _visible_node(request, pk)
    # Asked before the form is read, so a user who may not change the node gets 403 whatever they sent.
    refused = f"Only admins of {node.cluster.organization} cordon, drain and resume its nodes."
    policy.require(request.user, "node.drain", node, refused)
    form = form_class(request.POST, auto_id=f"{form_name}_%s")
    if form.is_valid():
        try:
            act(node, form.cleaned_data)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, done(node))
            return redirect("node-detail", pk=node.pk)
    return _render_node(request, node, HTTPStatus.BAD_REQUEST, **{f"{form_name}_form": form})


def _now(node: Node) -> str:
    return f"{node.name} is {node.get_state_display().lower()}."


@require_POST
def node_cordon(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    def cordon(node: Node, values: dict[str, Any]) -> object:
        return actions.cordon_node(request.user, node, values["reason"], http=request)  # refreshes ``node``

    return _change_node(request, pk, "cordon", cordon, _now)


@require_POST
def node_drain(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    def drain(node: Node, values: dict[str, Any]) -> object:
        grace = values["grace_seconds"]
        return actions.drain_node(request.user, node, values["reason"], grace_seconds=grace, http=request)

    return _change_node(request, pk, "drain", drain, _now, DrainForm)


@require_POST
def node_resume(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    def resume(node: Node, values: dict[str, Any]) -> object:
        return actions.resume_node(request.user, node, values["reason"], http=request)

    return _change_node(request, pk, "resume", resume, lambda n: f"{n.name} is back in service.")
