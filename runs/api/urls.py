"""URLs of the REST API."""

from rest_framework.routers import DefaultRouter

from runs.api.views import RunViewSet

router = DefaultRouter()
router.register("runs", RunViewSet, basename="run")

urlpatterns = router.urls
