from django.urls import path

from notifications import api

urlpatterns = [
    path("notifications/", api.NotificationListAPI.as_view(), name="api-notifications"),
    path("notifications/preferences/", api.PreferenceAPI.as_view(), name="api-notification-preferences"),
]
