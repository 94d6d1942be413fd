"""URL configuration: pages, the REST API under /api/v1/, its schema and docs, the Django admin. The error
handlers answer JSON under /api/ (a path no route matches, such as ``/api/v1/jobs/abc/``, included)."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.settings import api_settings

from portal import sso
from portal import views as portal_views

urlpatterns = [
    path("", portal_views.home, name="home"),
    path("favicon.ico", portal_views.favicon, name="favicon"),
    path("login/", sso.LoginView.as_view(), name="login"),
    # Single sign-on (404 while it is off); the names are mozilla-django-oidc's own.
    path("oidc/authenticate/", sso.SsoStartView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", sso.SsoCallbackView.as_view(), name="oidc_authentication_callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("scheduler.urls")),
    # DRF's token view names its own parsers; give it the project's (a too deeply nested body is a 400).
    path("api/v1/auth/token/", ObtainAuthToken.as_view(parser_classes=api_settings.DEFAULT_PARSER_CLASSES),
         name="api-token"),
    path("api/v1/", include("portal.governance.api_urls")),
    path("api/v1/", include("portal.teams.api_urls")),
    path("teams/", include("portal.teams.urls")),
    path("accounting/", include("accounting.urls")),
    path("api/v1/", include("accounting.api_urls")),
    path("api/v1/", include("scheduler.api.urls")),
    path("govern/", include("portal.governance.urls")),
    path("notifications/", include("notifications.urls")),
    path("api/v1/", include("notifications.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("admin/", admin.site.urls),
]

handler400 = "portal.api.bad_request"
handler403 = "portal.api.permission_denied"
handler404 = "portal.api.page_not_found"
handler500 = "portal.api.server_error"
