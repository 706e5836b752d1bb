"""The costs API, for BI tools and scripts: a month's costs grouped any way, jobs' costs, team statements and
the fleet summary as CSV or XLSX, the price book, shared overhead, and the meter's last reconciliation.

Thin: costs come from ``attribution.kept`` cut to what the caller may see (``attribution.visible_to``: a
researcher or lead their teams', finance and admins everything); the price book changes through
``prices.set_price`` and friends (403 for anyone but finance and admins; 400 naming each bad field). Query
strings are checked by ``params`` (400 naming the parameter, unknown parameters too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import FileResponse, HttpResponse, HttpResponseBase, QueryDict, StreamingHttpResponse
from django.urls import include, path, re_path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView

from billing import attribution, columns, params, reports
from billing.actions import codes, periods, prices
from billing.attribution import Attribution, hours, money
from billing.models import GridIntensity, MeterState, Overhead, Price, Statement
from tenancy import policy
from tenancy.models import Organization
from tenancy.rest import TenantViewSet

MONTH = OpenApiParameter("month", OpenApiTypes.STR, description="YYYY-MM (UTC); default: this month.")
ORG = OpenApiParameter("organization", OpenApiTypes.STR, description="Id or slug; default: your first.")
TEAM = OpenApiParameter("team", OpenApiTypes.STR, description="Only this team (id or slug).")
FILE = {
    (200, "text/csv"): OpenApiResponse(OpenApiTypes.BINARY),
    (200, "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"): OpenApiResponse(OpenApiTypes.BINARY),
}
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def month_of(request: Request, *extra: str) -> tuple[Organization, Attribution]:
    """The organization and month the query names, cut to what the user may see."""
    params.unknown(request.query_params, {"month", "organization", *extra})
    organization = params.organization(request.user, request.query_params.get("organization"))
    month = params.month(request.query_params.get("month"))
    return organization, attribution.visible_to(request.user, attribution.kept(organization.pk, month))


def organization_asked(request: Request) -> Organization:
    """The organization the query names (``organization``, the only parameter), else the user's first."""
    params.unknown(request.query_params, {"organization"})
    return params.organization(request.user, request.query_params.get("organization"))


def json_object(request: Request) -> Mapping[str, Any]:
    """The request's body, which must be a JSON object (else a 400: a form's fields are not one)."""
    if not isinstance(request.data, Mapping) or isinstance(request.data, QueryDict):
        raise serializers.ValidationError({"non_field_errors": ["A JSON object (Content-Type: application/json)."]})
    return request.data


def amounts(row: Mapping[str, Any]) -> dict[str, str]:
    """A row's amounts by name, and the energy its accelerators drew (kWh, of which estimated)."""
    energy = {
        "energy_kwh": str(reports.kilo(row["energy_wh"])),
        "estimated_kwh": str(reports.kilo(row["estimated_wh"])),
        "emissions_kg": str(reports.kilo(row["emissions_g"])),
    }
    return {**columns.answered(columns.AMOUNTS, row), **energy}


def fleet_figures(month: Attribution) -> dict[str, str]:
    return {
        "capacity_cost": str(money(month.capacity_cost)),
        "overhead": str(money(month.overhead)),
        "total": str(money(month.fleet_total)),
        "unallocated_idle": str(money(month.unallocated_idle)),
        "unallocated_overhead": str(money(month.unallocated_overhead)),
        "unpriced_accelerator_hours": str(hours(month.unpriced_milli_seconds)),
    }


def download(
    name: str, ext: str, header: reports.Row, rows: Iterable[reports.Row], xlsx: Callable[[], IO[bytes]]
) -> HttpResponseBase:
    if ext == "csv":
        response: HttpResponseBase = StreamingHttpResponse(reports.csv_stream(header, rows), content_type="text/csv")
    else:
        response = FileResponse(xlsx(), content_type=XLSX)
    response["Content-Disposition"] = f'attachment; filename="{name}.{ext}"'
    return response


def as_issued(statement: Statement) -> HttpResponseBase:
    """A closed month's statement as it was issued: its bytes, its number and digest in the headers."""
    kind = "text/csv" if statement.format == Statement.Format.CSV else XLSX
    response = HttpResponse(bytes(statement.content), content_type=kind)
    response["Content-Disposition"] = f'attachment; filename="{statement.filename}"'
    response["X-QM-Statement"] = statement.number
    response["ETag"] = f'"{statement.sha256}"'
    return response


class CostsView(APIView):
    """A month's costs (usage, idle share, overhead share, total) grouped by any of day, team, project, user,
    cluster, flavor and capacity type; with the fleet's figures for finance and admins."""

    @extend_schema(
        parameters=[
            MONTH,
            ORG,
            TEAM,
            OpenApiParameter("group_by", OpenApiTypes.STR, description=", ".join(attribution.DIMENSIONS)),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        organization, month = month_of(request, "group_by", "team")
        by = params.group_by(request.query_params.get("group_by"))
        team = params.team(request.user, request.query_params.get("team"), organization.pk)
        if team is not None:
            month = month.for_teams([team.pk], fleet_visible=False)
        rows = []
        names = month.names
        for row in month.rollup(by):
            keys = {k: (v.isoformat() if k == "day" else v) for k, v in row.items() if k in by or k.endswith("_name")}
            if "team" in by or "project" in by:
                keys["cost_centre"] = names.cost_centre(row.get("team") or 0, row.get("project"))
            rows.append({**keys, **amounts(row)})
        body: dict[str, Any] = {
            "organization": organization.slug,
            "currency": month.currency,
            "month": reports.month_label(month.month),
            "group_by": list(by),
            "rows": rows,
            "totals": amounts(month.totals()),
        }
        if month.fleet_visible:
            body["fleet"] = fleet_figures(month)
        return Response(body)


class JobCostsView(APIView):
    """Jobs' usage cost in a month, costliest first (idle and overhead go to teams, not to jobs)."""

    @extend_schema(
        parameters=[MONTH, ORG, TEAM, OpenApiParameter("limit", OpenApiTypes.INT, description="1 to 10000; 50.")],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        organization, month = month_of(request, "team", "limit")
        limit = params.limit(request.query_params.get("limit"))
        team = params.team(request.user, request.query_params.get("team"), organization.pk)
        teams = [team.pk] if team else attribution.visible_teams(request.user, organization.pk)
        names = month.names
        jobs = [
            {
                "job": j.job,
                "name": j.name,
                "team": names.of("team", j.team),
                "project": names.of("project", j.project),
                "user": names.of("user", j.user),
                **columns.answered(columns.JOB_AMOUNTS, {"milli_seconds": j.milli_seconds, "cost": j.cost}),
            }
            for j in attribution.kept_job_costs(organization.pk, month.month, teams, limit)
        ]
        return Response({"month": reports.month_label(month.month), "currency": month.currency, "jobs": jobs})


class StatementView(APIView):
    """A team's monthly statement: its lines per project, user, cluster, flavor and capacity type with their
    idle and overhead shares (CSV), or the same with days and jobs in more sheets (XLSX)."""

    @extend_schema(parameters=[MONTH, ORG], responses=FILE)
    def get(self, request: Request, team: str, ext: str) -> HttpResponseBase:
        organization, month = month_of(request)
        found = params.team(request.user, team, organization.pk)
        assert found is not None
        statement = periods.issued(organization.pk, month.month, found.pk, ext)
        if statement is not None:
            return as_issued(statement)
        name = f"statement-{found.slug}-{reports.month_label(month.month)}"
        team_id = found.pk

        def xlsx() -> IO[bytes]:
            return reports.statement_xlsx(
                month, team_id, attribution.job_costs(organization.pk, month.month, [team_id])
            )

        return download(name, ext, reports.STATEMENT_HEADER, reports.statement_rows(month, team_id), xlsx)


class FleetSummaryView(APIView):
    """The fleet's month: every team's total, what stayed unallocated, and the fleet's total (CSV), with the
    pools and days in more sheets (XLSX). Finance and admins only."""

    @extend_schema(parameters=[MONTH, ORG], responses=FILE)
    def get(self, request: Request, ext: str) -> HttpResponseBase:
        organization, month = month_of(request)
        if not month.fleet_visible:
            raise PermissionDenied("The fleet summary is for finance and organization admins.")
        statement = periods.issued(organization.pk, month.month, None, ext)
        if statement is not None:
            return as_issued(statement)
        name = f"fleet-{organization.slug}-{reports.month_label(month.month)}"
        return download(name, ext, reports.FLEET_HEADER, reports.fleet_rows(month), lambda: reports.fleet_xlsx(month))


class MeterView(APIView):
    """The meter's last run and last reconciliation (metered against placed accelerator-hours)."""

    @extend_schema(parameters=[ORG], responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        organization = organization_asked(request)
        policy.require(
            request.user,
            "finance.read",
            organization,
            "Only finance or an organization admin may change the price book.",
        )
        state = MeterState.objects.filter(organization=organization).first()
        return Response(
            {
                "last_run_started_at": state.last_run_started_at if state else None,
                "last_reconciled_at": state.last_reconciled_at if state else None,
                "last_reconciliation": state.last_reconciliation if state else {},
            }
        )


# --- closed months -----------------------------------------------------------------------------------------


def period_body(organization: Organization, row: Mapping[str, Any]) -> dict[str, Any]:
    """A month as ``periods.periods`` lists it, for the API: open or closed, its statements in force."""
    period, label = row["period"], reports.month_label(row["month"])
    query = f"?organization={organization.slug}&month={label}"
    return {
        "month": label,
        "state": "closed" if row["closed"] else ("reopened" if period else "open"),
        "ended": row["ended"],
        "closed_at": period.closed_at if period and row["closed"] else None,
        "closed_by": period.closed_by.username if period and row["closed"] and period.closed_by else None,
        "revision": period.revision if period else 0,
        "corrections_booked": str(row["corrections"]),
        "statements": [
            {
                "number": s.number,
                "team": s.team.slug if s.team else None,
                "format": s.format,
                "sha256": s.sha256,
                "issued_at": s.issued_at,
                "url": (
                    f"/api/v1/billing/statements/{s.team.slug}.{s.format}{query}"
                    if s.team
                    else f"/api/v1/billing/fleet.{s.format}{query}"
                ),
            }
            for s in row["statements"]
        ],
    }


class CodesView(APIView):
    """The organization's currency (ISO 4217, on every amount) and the cost-centre codes of its teams and projects
    (``team`` or ``team/project`` slugs), carried into statements. Finance and admins read and set them; a change
    gives only what it changes (``{"currency": "EUR"}``, ``{"cost_centres": {"vision": "CC-1001"}}``)."""

    @extend_schema(parameters=[ORG], responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        organization = organization_asked(request)
        policy.require(request.user, "finance.read", organization, "Billing codes are for finance and admins.")
        return Response(codes.codes(organization))

    @extend_schema(parameters=[ORG], request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT})
    def put(self, request: Request) -> Response:
        organization = organization_asked(request)
        return Response(codes.set_codes(request.user, organization, json_object(request), http=request))  # type: ignore[arg-type]


class PeriodsView(APIView):
    """The last twelve ended months and this one, open or closed, with the statements issued at each close and
    the corrections of closed months booked in each. Finance and admins."""

    @extend_schema(parameters=[ORG], responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        organization = organization_asked(request)
        rows = periods.periods(organization, request.user)
        return Response({"organization": organization.slug, "periods": [period_body(organization, r) for r in rows]})


class PeriodActionView(APIView):
    """Close a month (``{"month": "YYYY-MM"}``: its attribution is frozen and its statements issued), or reopen
    the latest closed one (``{"month": ..., "reason": ...}``, audited). Finance and admins."""

    action = "close"

    @extend_schema(parameters=[ORG], request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT})
    def post(self, request: Request) -> Response:
        organization = organization_asked(request)
        params.unknown(json_object(request), {"month"} if self.action == "close" else {"month", "reason"})
        if self.action == "close":
            period = periods.close(request.user, organization, request.data.get("month"), http=request)  # type: ignore[arg-type]
        else:
            period = periods.reopen(
                request.user,  # type: ignore[arg-type]
                organization,
                request.data.get("month"),
                request.data.get("reason"),
                http=request,
            )
        row = periods.period(organization, request.user, period.month)
        code = status.HTTP_201_CREATED if self.action == "close" else status.HTTP_200_OK
        return Response(period_body(organization, row), status=code)


# --- the price book and overhead ---------------------------------------------------------------------------


class PriceSerializer(serializers.ModelSerializer[Price]):
    cluster: Any = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor: Any = serializers.SlugRelatedField(slug_field="name", read_only=True)
    updated_by: Any = serializers.StringRelatedField()

    class Meta:
        model = Price
        fields = (
            "id",
            "cluster",
            "flavor",
            "capacity_type",
            "effective_from",
            "hourly_rate",
            *prices.ON_PREM_FIELDS,
            "rate",
            "note",
            "updated_at",
            "updated_by",
        )
        read_only_fields = fields


class OverheadSerializer(serializers.ModelSerializer[Overhead]):
    updated_by: Any = serializers.StringRelatedField()

    class Meta:
        model = Overhead
        fields = ("id", "name", "amount", "starts", "ends", "updated_at", "updated_by")
        read_only_fields = fields


class GridIntensitySerializer(serializers.ModelSerializer[GridIntensity]):
    updated_by: Any = serializers.StringRelatedField()

    class Meta:
        model = GridIntensity
        fields = ("id", "region", "effective_from", "grams_per_kwh", "note", "updated_at", "updated_by")
        read_only_fields = fields


class BookViewSet(TenantViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Rows of the price book (prices, overhead, grid intensities): finance and admins read and change them; others
    see none. The body of a create or change is judged whole by ``prices`` (every field again on a change) through
    the subclass's ``setter`` and ``deleter``."""

    setter: Callable[..., Any]
    deleter: Callable[..., None]

    def body(self, request: Request) -> dict[str, Any]:
        return dict(json_object(request))

    def organization(self, request: Request) -> Organization:
        return organization_asked(request)

    @extend_schema(request=OpenApiTypes.OBJECT, responses={201: OpenApiTypes.OBJECT})
    def create(self, request: Request) -> Response:
        row = type(self).setter(request.user, self.organization(request), self.body(request), None, http=request)
        return Response(self.get_serializer(row).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT})
    def update(self, request: Request, pk: str) -> Response:
        row = self.get_object()
        row = type(self).setter(request.user, row.organization, self.body(request), row, http=request)
        return Response(self.get_serializer(row).data)

    def destroy(self, request: Request, pk: str) -> Response:
        type(self).deleter(request.user, self.get_object(), http=request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class PriceViewSet(BookViewSet):
    model = Price
    serializer_class = PriceSerializer
    setter = prices.set_price
    deleter = prices.delete_price

    def get_queryset(self) -> QuerySet[Price]:
        return super().get_queryset().select_related("cluster", "flavor", "updated_by")


class OverheadViewSet(BookViewSet):
    model = Overhead
    serializer_class = OverheadSerializer
    setter = prices.set_overhead
    deleter = prices.delete_overhead


class GridIntensityViewSet(BookViewSet):
    """Grams of CO2e a kWh emits in a region (a cluster's ``region``) from a day on: what turns energy into
    emissions on statements."""

    model = GridIntensity
    serializer_class = GridIntensitySerializer
    setter = prices.set_grid_intensity
    deleter = prices.delete_grid_intensity


router = SimpleRouter(trailing_slash=True)
router.register("prices", PriceViewSet, basename="price")
router.register("overheads", OverheadViewSet, basename="overhead")
router.register("grid-intensities", GridIntensityViewSet, basename="grid-intensity")

urlpatterns = [
    path("billing/costs/", CostsView.as_view(), name="billing-costs"),
    path("billing/job-costs/", JobCostsView.as_view(), name="billing-job-costs"),
    re_path(
        r"^billing/statements/(?P<team>[\w-]+)\.(?P<ext>csv|xlsx)$", StatementView.as_view(), name="billing-statement"
    ),
    re_path(r"^billing/fleet\.(?P<ext>csv|xlsx)$", FleetSummaryView.as_view(), name="billing-fleet"),
    path("billing/meter/", MeterView.as_view(), name="billing-meter"),
    path("billing/periods/", PeriodsView.as_view(), name="billing-periods"),
    path("billing/codes/", CodesView.as_view(), name="billing-codes"),
    path("billing/periods/close/", PeriodActionView.as_view(action="close"), name="billing-period-close"),
    path("billing/periods/reopen/", PeriodActionView.as_view(action="reopen"), name="billing-period-reopen"),
    path("", include(router.urls)),
]
