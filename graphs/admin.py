"""Staff views of workflows. Every write goes through the graphs services: a graph edited as JSON is
normalized and validated by `workflow_save` as deploy would judge it (its refusal shown on the graph
field, validator issue by issue); the owner is changed only by the "Transfer to another owner" page,
which lists what moves and asks for the new owner's username; a delete's confirmation page counts
everything the delete service erases. Generations, legacy artifacts, outbox rows and transfer records
are read-only; deployments and artifacts are never deleted here (only with their workflow), outbox rows
only drain. A user who owns workflows is deleted only after they are transferred or deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from graphs import services
from graphs.models import ContextArchiveOutbox, Deployment, LegacyArtifact, Workflow, WorkflowTransfer
from graphs.selectors import DRAFT_STATE, workflow_inventory, workflows_with_state
from opencompany.core.admin import (
    PrettyJSONField,
    ReadOnlyMixin,
    ServiceAdmin,
    pretty_json,
    preview,
    refusal_lines,
    service_call,
)
from opencompany.core.errors import ApplicationError
from opencompany.core.tokens import tokens_active_count

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
        help_text="The canvas graph as JSON. Saved through normalization and the same validation as "
        "deploy: a graph that breaks a rule, or that cannot answer a chat message (no Chat Trigger wired "
        "to an agent whose runtime is configured), is refused with the validator's messages.",
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
    actions = ["deploy", "reset", "transfer"]
    change_form_template = "admin/graphs/workflow/change_form.html"
    refusal_fields = {
        "invalid_context_topology": "graph",
        "unsupported_connection": "graph",
        "validation_failed": "graph",
        "invalid_graph": "graph",
        "graph_too_large": "graph",
        "parameters_too_large": "graph",
    }

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ("name", "owner", "graph")
        return ("id", "name", "owner", "revision", "graph", "expected_revision", "created_at", "updated_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The owner changes only through the transfer page, which says what moves with the workflow.
        return self.readonly_fields if obj is None else (*self.readonly_fields, "owner")

    def get_urls(self) -> list[URLPattern]:
        transfer = path(
            "<path:object_id>/transfer/",
            self.admin_site.admin_view(self.transfer_view),
            name="graphs_workflow_transfer",
        )
        return [transfer, *super().get_urls()]

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
                services.workflow_create_report,
                owner=data["owner"],
                name=data["name"],
                graph=data["graph"],
                deployable=True,
            )
            obj.pk = created.workflow.pk
            obj._state.adding = False
            self._report(request, created)
            return
        if {"graph", "name"} & set(form.changed_data):
            stored = Workflow.objects.get(pk=obj.pk)
            written = service_call(
                services.workflow_save,
                workflow=stored,
                graph=data["graph"] if "graph" in form.changed_data else stored.graph,
                expected_revision=data.get("expected_revision") or stored.revision,
                name=data["name"] if "name" in form.changed_data else None,
                deployable="graph" in form.changed_data,
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
        """Each workflow with everything the delete service erases for it (Memory, Context and its
        archives, chats, generations: rows no foreign key ties to the workflow included), counted; the
        summary totals them. Permission to delete the workflow is the one needed: the service removes
        rows staff may not delete one by one."""
        deleted: list[Any] = []
        totals: dict[str, int] = {"Workflows": 0}
        for workflow in sorted(objs, key=lambda w: w.pk):
            lines = workflow_inventory(owner_id=workflow.owner_id, workflow_ids=[workflow.pk])
            totals["Workflows"] += 1
            for line in lines:
                totals[line.label] = totals.get(line.label, 0) + line.count
            link = reverse("admin:graphs_workflow_change", args=[quote(workflow.pk)])
            deleted.append(format_html('Workflow: <a href="{}">{}</a>', link, workflow))
            deleted.append([f"{line.label}: {line.count}" for line in lines])
        return deleted, totals, set(), []

    def delete_model(self, request: HttpRequest, obj: Workflow) -> None:
        service_call(services.workflow_delete, workflow=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        for workflow in queryset.order_by("pk"):
            service_call(services.workflow_delete, workflow=workflow)

    @admin.action(description="Deploy (validate and admit or refresh the live generation)")
    def deploy(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        done = 0
        for workflow in queryset.order_by("pk"):
            try:
                services.workflow_deploy(workflow=workflow, actor=request.user)
            except ApplicationError as refused:
                # Every issue, not just the headline: staff fix them from this message.
                self.message_user(
                    request,
                    f"{workflow}: not deployed: " + " · ".join(refusal_lines(refused)),
                    messages.ERROR,
                )
                continue
            done += 1
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

    @admin.action(description="Transfer to another owner…")
    def transfer(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> HttpResponse | None:
        selected = list(queryset.values_list("pk", flat=True)[:2])
        if len(selected) != 1:
            self.message_user(
                request,
                "Select exactly one workflow to transfer: each transfer is confirmed on its own page, "
                "with what moves and the new owner's username.",
                messages.ERROR,
            )
            return None
        return HttpResponseRedirect(reverse("admin:graphs_workflow_transfer", args=[quote(selected[0])]))

    def transfer_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The transfer page: what moves with the workflow, counted; the new owner and their username
        typed to confirm. A refusal is shown on the form; a transfer goes back to the workflow."""
        workflow = self.get_object(request, unquote(object_id))
        if workflow is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        if not self.has_change_permission(request, workflow):
            raise PermissionDenied
        form = TransferForm(request.POST or None, workflow=workflow)
        if request.method == "POST" and form.is_valid():
            try:
                record = services.workflow_transfer(
                    workflow=workflow,
                    new_owner=form.cleaned_data["new_owner"],
                    confirm_username=form.cleaned_data["confirm_username"],
                    actor=request.user,
                )
            except ApplicationError as refused:
                form.add_refusal(refused)
            else:
                moved = ", ".join(f"{m['count']} {m['label'].lower()}" for m in record.moved if m["count"])
                self.message_user(
                    request,
                    f"Transferred “{record.workflow_name}” from {record.from_username} to "
                    f"{record.to_username}: {moved or 'nothing else was kept for it'}.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(
                    reverse("admin:graphs_workflow_change", args=[quote(workflow.pk)])
                )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Transfer “{workflow.name}” to another owner",
            "opts": self.opts,
            "original": workflow,
            "form": form,
            "moves": workflow_inventory(owner_id=workflow.owner_id, workflow_ids=[workflow.pk]),
            "tokens": tokens_active_count(user_id=workflow.owner_id),
            "transfers": WorkflowTransfer.objects.filter(workflow_id=workflow.pk)[:10],
        }
        return TemplateResponse(request, "admin/graphs/workflow/transfer.html", context)


class TransferForm(forms.Form):
    new_owner = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(), label="New owner", help_text="Active accounts only."
    )
    confirm_username = forms.CharField(
        label="Type the new owner's username to confirm",
        max_length=150,
        strip=True,
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(self, *args: Any, workflow: Workflow, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        users = get_user_model().objects.filter(is_active=True).exclude(pk=workflow.owner_id)
        self.fields["new_owner"].queryset = users.order_by("username")  # type: ignore[attr-defined]

    def add_refusal(self, refused: ApplicationError) -> None:
        """The service's refusal on the field it names (else on the form), with its code."""
        fields = refused.extra.get("fields") if isinstance(refused.extra.get("fields"), dict) else {}
        for name, problems in (fields or {}).items():
            for problem in problems if isinstance(problems, list) else [problems]:
                self.add_error(name if name in self.fields else None, str(problem))
        self.add_error(None, f"{refused.message} ({refused.code})")


@admin.register(WorkflowTransfer)
class WorkflowTransferAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Who gave which workflow to whom, when, and what moved with it. Written only by a transfer."""

    list_display = (
        "created_at",
        "workflow_id",
        "workflow_name",
        "from_username",
        "to_username",
        "actor_username",
        "summary",
    )
    list_filter = ("created_at",)
    search_fields = ("workflow_id", "workflow_name", "from_username", "to_username", "actor_username")
    readonly_fields = (
        "workflow_id",
        "workflow_name",
        "from_owner",
        "from_username",
        "to_owner",
        "to_username",
        "actor",
        "actor_username",
        "created_at",
        "moved_readable",
        "tokens_stopped",
    )
    exclude = ("moved",)

    @admin.display(description="what moved")
    def summary(self, obj: WorkflowTransfer) -> str:
        return preview(", ".join(f"{m['count']} {m['label'].lower()}" for m in obj.moved if m.get("count")))

    @admin.display(description="what moved")
    def moved_readable(self, obj: WorkflowTransfer) -> str:
        rows = ((m.get("label"), m.get("count")) for m in obj.moved)
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{}: {}</li>", rows))


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
    """A user who owns workflows is not deleted: the cascade would skip each workflow's delete service
    (its Memory, Context and archive outbox). The delete page, single or bulk, lists their workflows,
    each with a link to transfer it to another owner and one to delete it, and deletes nothing."""

    delete_confirmation_template = "admin/auth/user/owner_delete_confirmation.html"
    delete_selected_confirmation_template = "admin/auth/user/owner_delete_selected_confirmation.html"

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        users = list(objs)
        owned = list(
            Workflow.objects.filter(owner__in=[u.pk for u in users])
            .select_related("owner")
            .order_by("owner__username", "name", "pk")
        )
        if not owned:
            return super().get_deleted_objects(objs, request)
        protected = [
            format_html(
                '{} owns workflow “{}”: <a href="{}">transfer it to another owner</a> or '
                '<a href="{}">delete it</a>',
                workflow.owner.get_username(),
                workflow.name,
                reverse("admin:graphs_workflow_transfer", args=[quote(workflow.pk)]),
                reverse("admin:graphs_workflow_delete", args=[quote(workflow.pk)]),
            )
            for workflow in owned
        ]
        return [], {}, set(), protected

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        if Workflow.objects.filter(owner=obj).exists():
            # A workflow given to the user after the page was drawn: the same rule, said plainly.
            self.message_user(
                request, f"Not deleted: {obj} owns workflows; transfer or delete them first.", messages.ERROR
            )
            return
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        owners = set(Workflow.objects.filter(owner__in=queryset).values_list("owner_id", flat=True))
        if owners:
            names = ", ".join(sorted(str(u) for u in queryset.filter(pk__in=owners)))
            self.message_user(
                request,
                f"Not deleted: {names} own workflows; transfer or delete those first.",
                messages.ERROR,
            )
        queryset.exclude(pk__in=owners).delete()


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, OwnerAwareUserAdmin)
