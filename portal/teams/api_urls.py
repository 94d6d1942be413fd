"""Team endpoints of the REST API (mounted under /api/v1/)."""

from django.urls import path

from portal.teams import api

urlpatterns = [
    path("teams/<slug:name>/share/", api.TeamShareAPI.as_view(), name="api-team-share"),
]
