from django.urls import path

from accounting import api

urlpatterns = [
    path("usage/", api.UsageAPI.as_view(), name="api-usage"),
    path("reports/chargeback/", api.ChargebackAPI.as_view(), name="api-chargeback"),
    path("reports/fairness/", api.FairnessAPI.as_view(), name="api-fairness"),
]
