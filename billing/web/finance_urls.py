"""Finance's pages, mounted at ``/billing/`` by ``billing/web/urls.py``: costs, team statements, the price book."""

from django.urls import path

from billing.web import finance as views

urlpatterns = [
    path("", views.costs, name="costs"),
    path("teams/<int:pk>/", views.team_costs, name="costs-team"),
    path("prices/", views.price_book, name="price-book"),
    path("prices/<int:pk>/", views.edit, {"kind": "price"}, name="price-edit"),
    path("prices/<int:pk>/delete/", views.delete, {"kind": "price"}, name="price-delete"),
    path("prices/overhead/", views.overhead_add, name="overhead-add"),
    path("prices/overhead/<int:pk>/", views.edit, {"kind": "overhead"}, name="overhead-edit"),
    path("prices/overhead/<int:pk>/delete/", views.delete, {"kind": "overhead"}, name="overhead-delete"),
]
