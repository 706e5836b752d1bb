from django.urls import path

from observability.web import views

urlpatterns = [
    path("", views.slo_page, name="slo"),
]
