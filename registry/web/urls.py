"""The model registry's pages, included under ``/models/`` by ``portal/urls.py``."""

from django.urls import path

from registry.web import views

urlpatterns = [
    path("", views.model_list, name="model-list"),
    path("publish/", views.publish, name="model-publish"),
    path("<id:pk>/", views.model_detail, name="model-detail"),
]
