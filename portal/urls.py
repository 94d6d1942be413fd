"""URL configuration: pages, the REST API under /api/v1/, its schema and docs, the Django admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.authtoken.views import obtain_auth_token

from portal import views as portal_views

urlpatterns = [
    path("", portal_views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("scheduler.urls")),
    path("api/v1/auth/token/", obtain_auth_token, name="api-token"),
    path("api/v1/", include("portal.governance.api_urls")),
    path("api/v1/", include("portal.teams.api_urls")),
    path("teams/", include("portal.teams.urls")),
    path("accounting/", include("accounting.urls")),
    path("api/v1/", include("accounting.api_urls")),
    path("api/v1/", include("scheduler.api.urls")),
    path("govern/", include("portal.governance.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("admin/", admin.site.urls),
]
