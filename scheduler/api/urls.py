from django.urls import path

from scheduler.api import loans, node, service_keys, views

urlpatterns = [
    path("jobs/", views.JobListCreateAPI.as_view(), name="api-jobs"),
    path("jobs/quote/", views.JobQuoteAPI.as_view(), name="api-job-quote"),
    path("jobs/<int:job_id>/", views.JobDetailAPI.as_view(), name="api-job"),
    path("jobs/<int:job_id>/cancel/", views.JobActionAPI.as_view(action_name="cancel"), name="api-job-cancel"),
    path("jobs/<int:job_id>/hold/", views.JobActionAPI.as_view(action_name="hold"), name="api-job-hold"),
    path("jobs/<int:job_id>/release/", views.JobActionAPI.as_view(action_name="release"), name="api-job-release"),
    path("jobs/<int:job_id>/explain/", views.JobExplainAPI.as_view(), name="api-job-explain"),
    path("jobs/<int:job_id>/resubmit/", views.JobResubmitAPI.as_view(), name="api-job-resubmit"),
    path("jobs/<int:job_id>/logs/", views.JobLogsAPI.as_view(), name="api-job-logs"),
    path("arrays/<int:array_id>/", views.JobArrayDetailAPI.as_view(), name="api-array"),
    path("arrays/<int:array_id>/cancel/", views.JobArrayCancelAPI.as_view(), name="api-array-cancel"),
    path("nodes/", views.NodeListAPI.as_view(), name="api-nodes"),
    path("nodes/<slug:name>/drain/", views.NodeStateAPI.as_view(target_state="draining"), name="api-node-drain"),
    path("nodes/<slug:name>/resume/", views.NodeStateAPI.as_view(target_state="ready"), name="api-node-resume"),
    path("quota-loans/", loans.LoanListAPI.as_view(), name="api-quota-loans"),
    path("quota-loans/<int:loan_id>/", loans.LoanDetailAPI.as_view(), name="api-quota-loan"),
    *[path(f"quota-loans/<int:loan_id>/{action}/", loans.LoanDecisionAPI.as_view(action_name=action),
           name=f"api-quota-loan-{action}") for action in ("approve", "decline", "cancel")],
    path("priority-classes/", views.PriorityClassListAPI.as_view(), name="api-priority-classes"),
    path("services/<slug:team>/<slug:service>/keys/", service_keys.ServiceKeyListAPI.as_view(),
         name="api-service-keys"),
    path("services/<slug:team>/<slug:service>/keys/<int:key_id>/", service_keys.ServiceKeyRevokeAPI.as_view(),
         name="api-service-key"),
    path("node/register/", node.NodeRegisterAPI.as_view(), name="node-register"),
    path("node/heartbeat/", node.NodeHeartbeatAPI.as_view(), name="node-heartbeat"),
    path("node/wait/", node.NodeWaitAPI.as_view(), name="node-wait"),
    path("node/jobs/<int:job_id>/events/", node.NodeJobEventAPI.as_view(), name="node-job-event"),
    path("node/jobs/<int:job_id>/log/", node.NodeJobLogAPI.as_view(), name="node-job-log"),
]
