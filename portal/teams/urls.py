"""Team pages under /teams/."""

from django.urls import path

from portal.teams import views, views_loans

urlpatterns = [
    path("", views.team_index, name="team-index"),
    path("<slug:name>/", views.team_dashboard, name="team-dashboard"),
    path("<slug:name>/members/", views.member_set, name="team-member-set"),
    path("<slug:name>/members/<str:username>/remove/", views.member_remove, name="team-member-remove"),
    path("<slug:name>/loans/", views_loans.loan_request, name="team-loan-request"),
    path("<slug:name>/loans/<int:loan_id>/<slug:action>/", views_loans.loan_decide, name="team-loan-decide"),
    path("<slug:name>/templates/", views.template_list, name="template-list"),
    path("<slug:name>/templates/<int:template_id>/delete/", views.template_delete, name="template-delete"),
]
