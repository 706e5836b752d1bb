"""Billing's pages, under ``billing/``: the costs (a month's costs, team statements) and the price book, for
finance and admins; procurement's capacity forecasts and what-ifs."""

from django.urls import path

from billing.web import codes, costs, forecast, periods, plan, studies, whatif

urlpatterns = [
    path("", costs.costs, name="costs"),
    path("teams/<id:pk>/", costs.team_costs, name="costs-team"),
    path("prices/", costs.price_book, name="price-book"),
    path("prices/<id:pk>/", costs.edit, {"kind": "price"}, name="price-edit"),
    path("prices/<id:pk>/delete/", costs.delete, {"kind": "price"}, name="price-delete"),
    path("prices/overhead/", costs.overhead_add, name="overhead-add"),
    path("prices/overhead/<id:pk>/", costs.edit, {"kind": "overhead"}, name="overhead-edit"),
    path("prices/overhead/<id:pk>/delete/", costs.delete, {"kind": "overhead"}, name="overhead-delete"),
    path("periods/", periods.period_list, name="billing-periods"),
    path("codes/", codes.codes_edit, name="billing-codes"),
    path("capacity/", forecast.capacity, name="capacity-forecast"),
    path("capacity/plan/", plan.plan, name="capacity-plan"),
    path("capacity/plan/<id:pk>/remove/", plan.remove, name="capacity-plan-remove"),
    path("what-ifs/", whatif.what_if_list, name="what-if-list"),
    path("what-ifs/<id:pk>/", whatif.what_if_detail, name="what-if-detail"),
    path("what-ifs/<id:pk>/status/", whatif.what_if_status, name="what-if-status"),
    path("what-ifs/studies/", studies.study_new, name="what-if-study-new"),
    path("what-ifs/studies/<id:pk>/", studies.study_detail, name="what-if-study"),
    path("what-ifs/studies/<id:pk>/status/", studies.study_status, name="what-if-study-status"),
]
