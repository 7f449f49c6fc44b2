"""URLs of the dashboard: a page each, and the fragments its page polls or swaps."""

from django.urls import path

from runs.web import (
    cluster_views,
    compare_views,
    log_views,
    metrics_views,
    observation_views,
    results_views,
    run_views,
    submit_views,
)

app_name = "runs"

RUN = "runs/<str:run_id>/"
TASK = RUN + "tasks/<str:task_id>/"

urlpatterns = [
    path("", run_views.run_list, name="run-list"),
    path("runs/table/", run_views.run_list_table, name="run-list-table"),
    path("runs/new/", submit_views.run_new, name="run-new"),
    path("runs/compare/", compare_views.compare, name="compare"),
    path(RUN, run_views.run_detail, name="run-detail"),
    path(RUN + "live/", run_views.run_live, name="run-live"),
    path(RUN + "cancel/", run_views.run_cancel, name="run-cancel"),
    path(RUN + "labels/", run_views.run_labels, name="run-labels"),
    path(RUN + "rerun/", submit_views.run_rerun, name="run-rerun"),
    path(RUN + "resume/", submit_views.run_resume, name="run-resume"),
    path(TASK + "logs/", log_views.task_log_page, name="task-logs"),
    path(TASK + "logs/live/", log_views.task_log_layout, name="task-logs-live"),
    path(TASK + "logs/<str:name>/", log_views.task_log_text, name="task-log-text"),
    path(TASK + "out/<path:path>", run_views.output_file, name="output-file"),
    path(TASK + "results/", results_views.task_results, name="task-results"),
    path(TASK + "results/table/", results_views.task_results_table, name="task-results-table"),
    path(TASK + "results/plot/", results_views.task_results_plot, name="task-results-plot"),
    path(TASK + "results.csv", results_views.results_csv, name="task-results-csv"),
    path(TASK + "results.parquet", results_views.results_parquet, name="task-results-parquet"),
    path("placements/", cluster_views.placements, name="placements"),
    path("placements/live/", cluster_views.placements_live, name="placements-live"),
    path("nodes/", cluster_views.nodes, name="nodes"),
    path("nodes/<str:name>/release/", cluster_views.node_release, name="node-release"),
    path("observations/", observation_views.observations, name="observations"),
    path("metrics", metrics_views.metrics, name="metrics"),
]
