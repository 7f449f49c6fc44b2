"""URLs of the REST API; an unknown path below /api/ is a JSON 404 like any other."""

from django.urls import path, re_path
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import DefaultRouter

from runs.api import account_views, cluster_views, library_views, results_views, task_views
from runs.api.views import RunViewSet

router = DefaultRouter()
router.register("runs", RunViewSet, basename="run")
router.register("observations", library_views.ObservationViewSet, basename="observation")
router.register("snapshots", library_views.SnapshotViewSet, basename="snapshot")

TASK = "runs/<str:run_id>/tasks/<str:task_id>/"


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE"])
@permission_classes([AllowAny])
def not_found(request: Request, rest: str) -> Response:
    raise NotFound(f"no such API path: /api/{rest}")


urlpatterns = [
    path(TASK, task_views.task_detail, name="api-task"),
    path(TASK + "logs/", task_views.log_list, name="api-logs"),
    path(TASK + "logs/<str:name>/", task_views.log_text, name="api-log"),
    path(TASK + "outputs/", task_views.output_list, name="api-outputs"),
    path(TASK + "outputs/<path:path>", task_views.output_file, name="api-output-file"),
    path(TASK + "results/", results_views.results_page, name="api-results"),
    path(TASK + "results.csv", results_views.results_csv, name="api-results-csv"),
    path(TASK + "results.parquet", results_views.results_parquet, name="api-results-parquet"),
    path("results/", results_views.compared_page, name="api-compared-results"),
    path("placements/", cluster_views.placement_list, name="api-placements"),
    path("nodes/", cluster_views.node_list, name="api-nodes"),
    path("nodes/<str:name>/release/", cluster_views.node_release, name="api-node-release"),
    path("task-types/", library_views.task_type_list, name="api-task-types"),
    path("usage/", library_views.usage_list, name="api-usage"),
    path("me/", account_views.me, name="api-me"),
    path("token/", account_views.TokenView.as_view(), name="api-token"),
    *router.urls,
    re_path(r"^(?P<rest>.*)$", not_found),
]
