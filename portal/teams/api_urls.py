"""Team endpoints of the REST API (mounted under /api/v1/)."""

from django.urls import path

from portal.teams import api

urlpatterns = [
    path("teams/<slug:name>/share/", api.TeamShareAPI.as_view(), name="api-team-share"),
    path("teams/<slug:name>/members/", api.TeamMembersAPI.as_view(), name="api-team-members"),
    path("teams/<slug:name>/members/<str:username>/", api.TeamMemberAPI.as_view(), name="api-team-member"),
    path("teams/<slug:name>/templates/", api.TeamTemplatesAPI.as_view(), name="api-team-templates"),
    path("teams/<slug:name>/templates/<int:template_id>/", api.TeamTemplateAPI.as_view(),
         name="api-team-template"),
]
