from django.urls import path

from graphs.api import views

urlpatterns = [
    path("account/erase", views.AccountEraseView.as_view(), name="account-erase"),
    path("node-specs", views.NodeSpecsView.as_view(), name="node-specs"),
    path("workflows", views.WorkflowListView.as_view(), name="workflows"),
    path("workflows/import", views.WorkflowImportView.as_view(), name="workflow-import"),
    path("workflows/<str:workflow_id>", views.WorkflowDetailView.as_view(), name="workflow"),
    path(
        "workflows/<str:workflow_id>/validate", views.WorkflowValidateView.as_view(), name="workflow-validate"
    ),
    path("workflows/<str:workflow_id>/deploy", views.WorkflowDeployView.as_view(), name="workflow-deploy"),
    path("workflows/<str:workflow_id>/reset", views.WorkflowResetView.as_view(), name="workflow-reset"),
    path("workflows/<str:workflow_id>/export", views.WorkflowExportView.as_view(), name="workflow-export"),
    path(
        "workflows/<str:workflow_id>/agents/<str:agent_node_id>/subagents",
        views.SubagentView.as_view(),
        name="workflow-subagents",
    ),
]
