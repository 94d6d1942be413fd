"""Governance pages under /govern/ (platform admins only)."""

from django.urls import path

from portal.governance import views, views_admin, views_images, views_policies, views_slurm

urlpatterns = [
    path("", views.index, name="govern"),
    path("quotas/", views.quotas, name="govern-quotas"),
    path("priority-classes/", views.priority_classes, name="govern-priority-classes"),
    path("priority-classes/new/", views.priority_class_edit, name="govern-priority-class-new"),
    path("priority-classes/<slug:name>/", views.priority_class_edit, name="govern-priority-class"),
    path("teams/", views_admin.teams, name="govern-teams"),
    path("members-import/", views_admin.members_import, name="govern-members-import"),
    path("teams/<slug:name>/", views_admin.team_edit, name="govern-team"),
    path("gpu-models/", views_admin.gpu_models, name="govern-gpu-models"),
    path("sso/", views_admin.sso_rules, name="govern-sso"),
    path("sso/<int:pk>/delete/", views_admin.sso_rule_delete, name="govern-sso-delete"),
    path("pools/", views.pools, name="govern-pools"),
    path("pools/new/", views_admin.pool_new, name="govern-pool-new"),
    path("pools/<slug:name>/teams/", views.pool_teams, name="govern-pool-teams"),
    path("images/", views_images.images, name="govern-images"),
    path("images/kinds/<slug:kind>/", views_images.kind_image, name="govern-kind-image"),
    path("images/pools/<slug:name>/", views_images.pool_images, name="govern-pool-images"),
    path("policies/", views_policies.policies, name="govern-policies"),
    path("policies/<slug:name>/", views_policies.policy_edit, name="govern-policy"),
    path("policies/<slug:name>/versions/<int:number>/activate/", views_policies.policy_activate,
         name="govern-policy-activate"),
    path("nodes/", views.nodes, name="govern-nodes"),
    path("nodes/<slug:name>/drain/", views.node_state, {"target": "drain"}, name="govern-node-drain"),
    path("nodes/<slug:name>/resume/", views.node_state, {"target": "resume"}, name="govern-node-resume"),
    path("slurm-accounting/", views_slurm.slurm_accounting, name="govern-slurm-accounting"),
    path("budgets/", views.budgets, name="govern-budgets"),
    path("budgets/new/", views.budget_edit, name="govern-budget-new"),
    path("budgets/<int:pk>/", views.budget_edit, name="govern-budget"),
    path("budgets/<int:pk>/delete/", views.budget_delete, name="govern-budget-delete"),
    path("audit/", views.audit_log, name="govern-audit"),
    path("queue/", views.queue, name="govern-queue"),
    path("queue/<int:job_id>/hold/", views.queue_hold, {"target": "hold"}, name="govern-queue-hold"),
    path("queue/<int:job_id>/release/", views.queue_hold, {"target": "release"}, name="govern-queue-release"),
    path("queue/<int:job_id>/priority/", views.queue_priority, name="govern-queue-priority"),
]
