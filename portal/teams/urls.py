"""Team pages under /teams/."""

from django.urls import path

from portal.teams import views

urlpatterns = [
    path("", views.team_index, name="team-index"),
    path("<slug:name>/", views.team_dashboard, name="team-dashboard"),
    path("<slug:name>/members/", views.member_set, name="team-member-set"),
    path("<slug:name>/members/<str:username>/remove/", views.member_remove, name="team-member-remove"),
    path("<slug:name>/templates/", views.template_list, name="template-list"),
    path("<slug:name>/templates/<int:template_id>/delete/", views.template_delete, name="template-delete"),
]
