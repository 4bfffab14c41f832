from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from graphs import services
from graphs.models import ContextArchiveOutbox, Deployment, LegacyArtifact, Workflow
from graphs.selectors import workflows_with_state
from opencompany.core.admin import pretty_json

if TYPE_CHECKING:
    from graphs.selectors import WorkflowWithState


class DeploymentInline(admin.TabularInline):
    model = Deployment
    extra = 0
    can_delete = False
    fields = ("generation", "state", "started_at", "reset_at")
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "revision", "generation", "state", "updated_at")
    list_filter = ("deployments__state", "created_at")
    search_fields = ("id", "name", "owner__username")
    list_select_related = ("owner",)
    readonly_fields = ("id", "revision", "graph_readable", "created_at", "updated_at")
    fields = ("id", "owner", "name", "revision", "graph_readable", "created_at", "updated_at")
    inlines = [DeploymentInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workflow]:
        # Generation and state come annotated, so the changelist costs the same at any page size.
        return workflows_with_state(queryset=super().get_queryset(request))

    @admin.display(description="generation", ordering="current_generation")
    def generation(self, obj: WorkflowWithState) -> int:
        return obj.current_generation

    @admin.display(description="state", ordering="current_state")
    def state(self, obj: WorkflowWithState) -> str:
        return obj.current_state

    @admin.display(description="graph")
    def graph_readable(self, obj: Workflow) -> str:
        return pretty_json(obj.graph)

    def delete_model(self, request: HttpRequest, obj: Workflow) -> None:
        services.workflow_delete(workflow=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        for workflow in queryset:
            services.workflow_delete(workflow=workflow)


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ("workflow", "generation", "state", "started_at", "reset_at")
    list_filter = ("state",)
    search_fields = ("workflow__id", "workflow__name")
    list_select_related = ("workflow",)
    readonly_fields = (
        "workflow",
        "generation",
        "state",
        "started_at",
        "reset_at",
        "graph_readable",
        "report",
    )
    exclude = ("graph", "reset_report")

    @admin.display(description="graph snapshot")
    def graph_readable(self, obj: Deployment) -> str:
        return pretty_json(obj.graph)

    @admin.display(description="reset report")
    def report(self, obj: Deployment) -> str:
        return pretty_json(obj.reset_report)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(LegacyArtifact)
class LegacyArtifactAdmin(admin.ModelAdmin):
    list_display = ("workflow", "kind", "memory_node_id", "agent_node_id", "created_at")
    search_fields = ("workflow__id", "memory_node_id", "agent_node_id")
    list_select_related = ("workflow",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in LegacyArtifact._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ContextArchiveOutbox)
class ContextArchiveOutboxAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "workflow_id",
        "context_node_id",
        "reason",
        "state",
        "attempts",
        "created_at",
        "completed_at",
    )
    list_filter = ("state", "reason")
    search_fields = ("id", "workflow_id", "context_node_id")
    readonly_fields = [
        "id",
        "workflow_id",
        "owner_id",
        "context_node_id",
        "reason",
        "state",
        "attempts",
        "last_error",
        "result",
        "created_at",
        "completed_at",
    ]
    actions = ["drain_now"]

    @admin.action(description="Drain now (run the archivers for the selected pending rows)")
    def drain_now(self, request: HttpRequest, queryset: QuerySet[ContextArchiveOutbox]) -> None:
        totals = {"completed": 0, "pending": 0}
        for workflow_id in sorted(
            set(queryset.filter(state="pending").values_list("workflow_id", flat=True))
        ):
            result = services.outbox_drain(workflow_id=workflow_id)
            totals["completed"] += result["completed"]
            totals["pending"] += result["pending"]
        self.message_user(
            request, f"Archived {totals['completed']}; still pending {totals['pending']}.", messages.INFO
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
