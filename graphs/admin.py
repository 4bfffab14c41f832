"""Staff views of workflows. Every write goes through the graphs services: a graph edited as JSON is
normalized and validated by `workflow_save` (its refusal shown on the graph field, validator issue by
issue), an owner change moves the workflow's Memory and conversations with it or is refused, deletes
write the archive outbox. Generations, legacy artifacts and outbox rows are read-only; deployments and
artifacts are never deleted here (only with their workflow), outbox rows only drain."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from graphs import services
from graphs.models import ContextArchiveOutbox, Deployment, LegacyArtifact, Workflow
from graphs.selectors import DRAFT_STATE, workflows_with_state
from opencompany.core.admin import (
    PrettyJSONField,
    ReadOnlyMixin,
    ServiceAdmin,
    pretty_json,
    preview,
    service_call,
)

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

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(DRAFT_STATE, "draft"), (Deployment.State.LIVE, "live"), (Deployment.State.RESET, "reset")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(current_state=value) if value else queryset


class WorkflowForm(forms.ModelForm):
    graph = PrettyJSONField(
        required=False,
        help_text="The canvas graph as JSON. Saved through normalization and validation: a graph that "
        "breaks a Context rule or wires a port that does nothing is refused with the validator's messages.",
    )
    expected_revision = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Workflow
        fields = ("name", "owner", "graph")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.instance._state.adding:
            self.fields["expected_revision"].initial = self.instance.revision


@admin.register(Workflow)
class WorkflowAdmin(ServiceAdmin):
    form = WorkflowForm
    list_display = ("id", "name", "owner", "revision", "generation", "state", "nodes", "updated_at")
    list_filter = (StateFilter, "owner", "created_at")
    search_fields = ("id", "name", "owner__username")
    list_select_related = ("owner",)
    readonly_fields = ("id", "revision", "created_at", "updated_at")
    inlines = [DeploymentInline]
    actions = ["deploy", "reset"]
    refusal_fields = {
        "invalid_context_topology": "graph",
        "unsupported_connection": "graph",
        "invalid_graph": "graph",
        "graph_too_large": "graph",
        "parameters_too_large": "graph",
        "run_in_progress": "owner",
    }

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ("name", "owner", "graph")
        return ("id", "name", "owner", "revision", "graph", "expected_revision", "created_at", "updated_at")

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        return self.inlines if obj is not None else []

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workflow]:
        # Generation and state come annotated, so the changelist costs the same at any page size.
        return workflows_with_state(queryset=super().get_queryset(request))

    @admin.display(description="generation", ordering="current_generation")
    def generation(self, obj: WorkflowWithState) -> int:
        return obj.current_generation

    @admin.display(description="state", ordering="current_state")
    def state(self, obj: WorkflowWithState) -> str:
        return obj.current_state

    @admin.display(description="nodes")
    def nodes(self, obj: Workflow) -> str:
        nodes = (obj.graph or {}).get("nodes") or []
        kinds = sorted({str(n.get("type")) for n in nodes if isinstance(n, dict)})
        return preview(f"{len(nodes)}: {', '.join(kinds)}")

    def save_model(self, request: HttpRequest, obj: Workflow, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if not change:
            created = service_call(
                services.workflow_create_report, owner=data["owner"], name=data["name"], graph=data["graph"]
            )
            obj.pk = created.workflow.pk
            obj._state.adding = False
            self._report(request, created)
            return
        stored = Workflow.objects.get(pk=obj.pk)
        if "owner" in form.changed_data:
            service_call(services.workflow_change_owner, workflow=stored, new_owner=data["owner"])
        if {"graph", "name"} & set(form.changed_data):
            expected = data.get("expected_revision") or stored.revision
            if "owner" in form.changed_data:
                expected += 1  # the owner change above is this same edit's revision
            written = service_call(
                services.workflow_save,
                workflow=stored,
                graph=data["graph"] if "graph" in form.changed_data else stored.graph,
                expected_revision=expected,
                name=data["name"] if "name" in form.changed_data else None,
            )
            self._report(request, written)

    def _report(self, request: HttpRequest, written: services.GraphWrite) -> None:
        """Saved: say what deploy would still refuse, and the normalizer's warnings."""
        issues = written.validation.get("errors", [])
        if issues:
            self.message_user(
                request,
                f"Saved, but deploy will refuse it until these {len(issues)} issue(s) are fixed: "
                + "; ".join(f"{i['code']}: {i['message']}" for i in issues[:5]),
                messages.WARNING,
            )
        for warning in [*written.warnings, *written.validation.get("warnings", [])][:5]:
            self.message_user(request, f"{warning.get('code')}: {warning.get('message')}", messages.WARNING)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # The delete service removes what goes with a workflow (generations, artifacts, the chat), rows
        # staff may not delete one by one: permission to delete the workflow is the one needed.
        deleted, model_count, _, protected = super().get_deleted_objects(objs, request)
        return deleted, model_count, set(), protected

    def delete_model(self, request: HttpRequest, obj: Workflow) -> None:
        service_call(services.workflow_delete, workflow=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        for workflow in queryset.order_by("pk"):
            service_call(services.workflow_delete, workflow=workflow)

    @admin.action(description="Deploy (validate and admit or refresh the live generation)")
    def deploy(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        done = self.run_each(
            request, queryset.order_by("pk"), lambda wf: services.workflow_deploy(workflow=wf), "deployed"
        )
        self.message_user(request, f"Deployed {done} workflow(s).", messages.SUCCESS)

    @admin.action(description="Reset (close the live generation: archive Context, apply Memory policies)")
    def reset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        done = self.run_each(
            request,
            queryset.order_by("pk"),
            lambda wf: services.workflow_reset(workflow=wf, actor=request.user),
            "reset",
        )
        self.message_user(request, f"Reset {done} workflow(s).", messages.SUCCESS)


@admin.register(Deployment)
class DeploymentAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Generations are history: a deleted one would let the next deploy reuse its number and bring back
    its conversations. They go only with their workflow."""

    list_display = ("workflow", "generation", "state", "started_at", "reset_at")
    list_filter = ("state", "workflow__owner")
    search_fields = ("workflow__id", "workflow__name", "workflow__owner__username")
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


@admin.register(LegacyArtifact)
class LegacyArtifactAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Immutable: recovered once from an old graph, kept with the workflow."""

    list_display = ("workflow", "kind", "memory_node_id", "agent_node_id", "markdown_preview", "created_at")
    list_filter = ("kind",)
    search_fields = ("workflow__id", "memory_node_id", "agent_node_id", "markdown")
    list_select_related = ("workflow",)
    readonly_fields = ("workflow", "kind", "memory_node_id", "agent_node_id", "context_node_id", "markdown")

    @admin.display(description="markdown")
    def markdown_preview(self, obj: LegacyArtifact) -> str:
        return preview(obj.markdown)


@admin.register(ContextArchiveOutbox)
class ContextArchiveOutboxAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Outbox rows leave only by draining; "Retry archive now" drains the selected pending rows."""

    list_display = (
        "id",
        "workflow_id",
        "context_node_id",
        "reason",
        "state",
        "attempts",
        "next_attempt_at",
        "error",
        "created_at",
        "completed_at",
    )
    list_filter = ("state", "reason")
    search_fields = ("id", "workflow_id", "context_node_id", "last_error")
    readonly_fields = (
        "id",
        "workflow_id",
        "owner_id",
        "context_node_id",
        "reason",
        "state",
        "attempts",
        "next_attempt_at",
        "last_error",
        "result",
        "created_at",
        "completed_at",
    )
    actions = ["retry_archive"]

    @admin.display(description="last error")
    def error(self, obj: ContextArchiveOutbox) -> str:
        return preview(obj.last_error, 80)

    @admin.action(description="Retry archive now (drain the selected pending rows)")
    def retry_archive(self, request: HttpRequest, queryset: QuerySet[ContextArchiveOutbox]) -> None:
        totals = {"completed": 0, "pending": 0}
        pending = queryset.filter(state=ContextArchiveOutbox.State.PENDING)
        for workflow_id in sorted(set(pending.values_list("workflow_id", flat=True))):
            result = services.outbox_drain(workflow_id=workflow_id)
            totals["completed"] += result["completed"]
            totals["pending"] += result["pending"]
        level = messages.SUCCESS if not totals["pending"] else messages.WARNING
        self.message_user(
            request, f"Archived {totals['completed']}; still pending {totals['pending']}.", level
        )


User = get_user_model()


class OwnerAwareUserAdmin(UserAdmin):
    """A user who owns workflows is not deleted raw: the cascade would skip each workflow's delete
    service (its archive outbox). Delete or give away their workflows first."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and Workflow.objects.filter(owner=obj).exists():
            return False
        return super().has_delete_permission(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        owners = set(Workflow.objects.filter(owner__in=queryset).values_list("owner_id", flat=True))
        if owners:
            names = ", ".join(sorted(str(u) for u in queryset.filter(pk__in=owners)))
            self.message_user(
                request,
                f"Not deleted: {names} own workflows; delete or give those away first.",
                messages.ERROR,
            )
        queryset.exclude(pk__in=owners).delete()


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, OwnerAwareUserAdmin)
