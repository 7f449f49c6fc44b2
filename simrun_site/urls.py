"""URLs of the service: the dashboard, the REST API, its schema and the admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

urlpatterns = [
    # Asked for by every browser, whatever the page says (the admin's and the API docs' too).
    path("favicon.ico", RedirectView.as_view(url=static("runs/favicon.ico"), permanent=True)),
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularRedocView.as_view(url_name="schema"), name="api-docs"),
    path("api/", include("runs.api.urls")),
    path("", include("runs.urls")),
]
