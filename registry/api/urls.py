"""The model registry API's routes, included under ``/api/v1/`` by ``portal/api/urls.py``."""

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from registry.api import views

router = SimpleRouter(trailing_slash=True)
router.register("models", views.ModelViewSet, basename="model")
router.register(r"models/(?P<model_pk>\d+)/versions", views.VersionViewSet, basename="model-version")

urlpatterns = [
    path("models/<id:model_pk>/versions/<id:pk>/artifact", views.ArtifactView.as_view(), name="model-version-artifact"),
    path("", include(router.urls)),
]
