"""Governance endpoints of the REST API (mounted under /api/v1/ before the scheduler's)."""

from django.urls import path

from portal.governance import api

urlpatterns = [
    path("teams/", api.TeamListAPI.as_view(), name="api-teams"),
    path("quotas/", api.QuotaAPI.as_view(), name="api-quotas"),
]
