"""Governance endpoints of the REST API (mounted under /api/v1/ before the scheduler's)."""

from django.urls import path

from portal.governance import api

urlpatterns = [
    path("teams/", api.TeamListAPI.as_view(), name="api-teams"),
    path("quotas/", api.QuotaAPI.as_view(), name="api-quotas"),
    path("queue/", api.QueueAPI.as_view(), name="api-queue"),
    path("jobs/<int:job_id>/priority-class/", api.JobPriorityAPI.as_view(), name="api-job-priority-class"),
]
