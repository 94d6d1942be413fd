from django.urls import path

from accounting import views

urlpatterns = [
    path("", views.dashboard, name="accounting"),
    path("statements/<int:statement_id>/", views.statement_download, name="accounting-statement"),
]
