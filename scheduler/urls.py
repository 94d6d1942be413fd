from django.urls import path

from scheduler import gateway, views, views_explain, views_services, views_whatif

urlpatterns = [
    path("jobs/", views.job_list, name="job-list"),
    path("jobs.csv", views.job_list_csv, name="job-list-csv"),
    path("jobs/new/", views.job_submit_view, name="job-submit"),
    path("jobs/quote/", views.job_quote_partial, name="job-quote"),
    path("jobs/arrays/<int:array_id>/cancel/", views.array_cancel_view, name="array-cancel"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/log/", views.job_log_partial, name="job-log"),
    path("jobs/<int:job_id>/gpu-chart/", views.job_gpu_chart, name="job-gpu-chart"),
    path("jobs/<int:job_id>/explain/", views_explain.job_explain_partial, name="job-explain"),
    path("jobs/<int:job_id>/resubmit/", views_explain.job_resubmit_view, name="job-resubmit"),
    path("jobs/<int:job_id>/<str:action>/", views.job_action, name="job-action"),
    path("cluster/", views.cluster, name="cluster"),
    path("whatif/", views_whatif.whatif_list, name="whatif"),
    path("whatif/<int:run_id>/", views_whatif.whatif_detail, name="whatif-detail"),
    path("services/<slug:team>/<slug:service>/", views_services.service_detail, name="service-detail"),
    path("serve/<slug:team>/<slug:service>/", gateway.serve, name="serve-root"),
    path("serve/<slug:team>/<slug:service>/<path:path>", gateway.serve, name="serve"),
    path("metrics", views.metrics, name="metrics"),
]
