from django.urls import path

from accounting import views

urlpatterns = [
    path("", views.dashboard, name="accounting"),
]
