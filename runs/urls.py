"""URLs of the dashboard."""

from django.urls import path

from runs import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="run-list"),
]
