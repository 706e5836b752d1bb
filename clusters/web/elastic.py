"""The elastic pool pages of a cluster's admins: add a pool, change one (or switch it off). Thin: the cluster
through ``for_user`` (another organization's: 404) and ``cluster.change`` (else 403, before any input is read),
every change through ``clusters.actions.elastic``; an invalid form is answered with 400 and its errors beside
their fields. The pools, their spend and their asks are shown on the cluster's page (``clusters.web.views``)."""

from __future__ import annotations

from http import HTTPStatus

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from clusters.actions import elastic as elastic_actions
from clusters.models import Cluster, ElasticPool
from clusters.web.forms import ElasticPoolForm
from clusters.web.views import _administered_cluster
from common.types import AuthenticatedHttpRequest


def pool_create(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    cluster = _administered_cluster(request, pk)
    form = ElasticPoolForm(request.POST or None, cluster=cluster)
    if request.method == "POST":
        if form.is_valid():
            try:
                pool = elastic_actions.create_pool(request.user, cluster, http=request, **form.settings())
            except ValidationError as exc:
                form.apply_errors(exc)
            else:
                messages.success(request, f"Elastic pool {pool.name} is added.")
                return redirect("cluster-detail", pk=cluster.pk)
        return _page(request, cluster, None, form, HTTPStatus.BAD_REQUEST)
    return _page(request, cluster, None, form)


def pool_edit(request: AuthenticatedHttpRequest, pk: int, pool_pk: int) -> HttpResponse:
    cluster = _administered_cluster(request, pk)
    pool = get_object_or_404(ElasticPool.objects.filter(cluster=cluster).select_related("accelerator"), pk=pool_pk)
    form = ElasticPoolForm(request.POST or None, cluster=cluster, pool=pool)
    if request.method == "POST":
        if form.is_valid():
            try:
                elastic_actions.change_pool(request.user, pool, http=request, **form.settings())
            except ValidationError as exc:
                form.apply_errors(exc)
            else:
                messages.success(request, f"Elastic pool {pool.name} is saved.")
                return redirect("cluster-detail", pk=cluster.pk)
        return _page(request, cluster, pool, form, HTTPStatus.BAD_REQUEST)
    return _page(request, cluster, pool, form)


def _page(
    request: AuthenticatedHttpRequest,
    cluster: Cluster,
    pool: ElasticPool | None,
    form: ElasticPoolForm,
    status: int = HTTPStatus.OK,
) -> HttpResponse:
    context = {"cluster": cluster, "pool": pool, "form": form}
    return render(request, "clusters/elastic_pool_form.html", context, status=status)
