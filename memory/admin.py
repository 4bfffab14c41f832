"""Staff views of Memory. Edits and deletes go through the services, with the item's scope derived by
`memory_scope` like every other caller: a staff edit (recorded as `staff:<id>`) bumps the version,
writes a revision and publishes `memory.updated`, and a refusal (a stale version, a limit, blank content,
a save that changes nothing) is shown on the form with the API's message, never beside a success. An
expiry in the past is refused on the form; "Expire now" hides items on purpose. Expired items stay
listed for staff (the expiry filter) and read-only; removed items live on as revisions (the "removed"
filter). Namespaces, revisions, receipts and embeddings are read-only; Clear Memory and the expiry
purge run as actions through their services, each after a page counting what it removes."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from graphs.models import Workflow
from memory import fields as f
from memory import services
from memory.inventory import memory_clear_inventory, memory_purge_inventory
from memory.models import MemoryEmbedding, MemoryItem, MemoryNamespace, MemoryReceipt, MemoryRevision
from memory.scope import MemoryScope, memory_scope, namespace_for
from opencompany.core import gate
from opencompany.core.admin import (
    GatedJSONFormField,
    ReadOnlyMixin,
    ServiceAdmin,
    WorkflowIdFilter,
    pretty_json,
    preview,
    service_call,
)
from opencompany.core.confirm import Confirmation, Group, confirmation_page, confirmed
from opencompany.core.errors import ApplicationError


def _stored_scope(owner_id: int, workflow_id: str, memory_node_id: str, namespace: str) -> MemoryScope:
    """The scope of a row whose workflow is gone, derived the one way from the row's own fields and
    checked against the namespace it is stored in."""
    derived = namespace_for(owner_id=owner_id, workflow_id=workflow_id, memory_node_id=memory_node_id)
    if derived != namespace:
        raise ApplicationError("not_found", "The item does not belong to this Memory node.", status=404)
    return MemoryScope(owner_id, workflow_id, memory_node_id, namespace)


def scope_of_item(item: MemoryItem, *, orphan_ok: bool = False) -> MemoryScope:
    """The item's scope, derived the one way (and checked against the namespace it is stored in). An
    item whose workflow was deleted has a scope only for removal (`orphan_ok`)."""
    workflow = Workflow.objects.filter(pk=item.workflow_id).first()
    if workflow is None:
        if orphan_ok:
            return _stored_scope(item.owner_id, item.workflow_id, item.memory_node_id, item.namespace)
        raise ApplicationError(
            "not_found", "The item's workflow no longer exists; it can only be deleted.", status=404
        )
    scope = memory_scope(workflow=workflow, memory_node_id=item.memory_node_id)
    if scope.namespace != item.namespace:
        raise ApplicationError("not_found", "The item does not belong to this Memory node.", status=404)
    return scope


def scope_of_namespace(namespace: MemoryNamespace) -> MemoryScope:
    """A namespace row's scope: through its workflow when it exists, else from the row's own fields."""
    workflow = Workflow.objects.filter(pk=namespace.workflow_id).first()
    if workflow is None:
        return _stored_scope(
            namespace.owner_id, namespace.workflow_id, namespace.memory_node_id, namespace.pk
        )
    scope = memory_scope(workflow=workflow, memory_node_id=namespace.memory_node_id)
    if scope.namespace != namespace.pk:
        raise ApplicationError(
            "not_found", "The namespace does not belong to this workflow's owner.", status=404
        )
    return scope


class ExpiryFilter(admin.SimpleListFilter):
    title = "expiry"
    parameter_name = "expiry"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("active", "active"), ("expired", "expired"), ("never", "never expires")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=now)
        if self.value() == "active":
            return queryset.exclude(expires_at__lte=now)
        if self.value() == "never":
            return queryset.filter(expires_at__isnull=True)
        return queryset


class RemovedFilter(admin.SimpleListFilter):
    title = "item state"
    parameter_name = "removed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "removed (forgotten, cleared, expired)"), ("no", "versions")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        removals = [
            MemoryRevision.Operation.FORGET,
            MemoryRevision.Operation.CLEAR,
            MemoryRevision.Operation.EXPIRE,
        ]
        if self.value() == "yes":
            return queryset.filter(operation__in=removals)
        if self.value() == "no":
            return queryset.exclude(operation__in=removals)
        return queryset


class MemoryRevisionInline(admin.TabularInline):
    model = MemoryRevision
    fk_name = "memory"
    extra = 0
    can_delete = False
    fields = ("version", "operation", "title", "category", "tags", "expires_at", "actor", "created_at")
    readonly_fields = fields
    ordering = ("version",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MemoryItemForm(forms.ModelForm):
    # Not required here: blank content reaches the service, which refuses it with the API's message.
    content = forms.CharField(
        widget=forms.Textarea,
        required=False,
        max_length=f.CONTENT_MAX,
        strip=False,
        help_text=f"At most {f.CONTENT_MAX} characters.",
    )
    tags = GatedJSONFormField(required=False, help_text='A JSON list of strings, e.g. ["coffee", "work"].')
    expected_version = forms.IntegerField(
        widget=forms.HiddenInput,
        required=False,
        min_value=1,
        max_value=gate.column_range(MemoryItem._meta.get_field("version"))[1],
    )

    class Meta:
        model = MemoryItem
        fields = ("title", "content", "category", "tags", "expires_at")
        help_texts = {
            "title": f"At most {f.TITLE_MAX} characters.",
            "category": f"At most {f.CATEGORY_MAX} characters; stored lower-case.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["expected_version"].initial = self.instance.version

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        expires_at = cleaned.get("expires_at")
        if "expires_at" in self.changed_data and expires_at is not None and expires_at <= timezone.now():
            # A past expiry hides the item from the agent and the owner at once: that is "Expire now".
            self.add_error(
                "expires_at",
                "This time has passed: the item would disappear from the agent and the owner's panel "
                "at once. Choose a future time, or use the “Expire now” action to hide it on purpose.",
            )
        return cleaned


@admin.register(MemoryItem)
class MemoryItemAdmin(ServiceAdmin):
    form = MemoryItemForm
    list_display = (
        "memory_id",
        "title",
        "content_preview",
        "category",
        "version",
        "state",
        "owner",
        "workflow_id",
        "memory_node_id",
        "expires_at",
        "updated_at",
    )
    list_filter = (ExpiryFilter, "owner", WorkflowIdFilter, "category", "indexing_state")
    search_fields = (
        "memory_id",
        "title",
        "content",
        "category",
        "namespace",
        "workflow_id",
        "memory_node_id",
    )
    list_select_related = ("owner",)
    readonly_fields = (
        "memory_id",
        "namespace",
        "owner",
        "workflow_id",
        "memory_node_id",
        "version",
        "state",
        "indexing_state",
        "created_at",
        "updated_at",
        "created_by",
        "updated_by",
    )
    fields = (
        *readonly_fields[:5],
        "title",
        "content",
        "category",
        "tags",
        "expires_at",
        "expected_version",
        *readonly_fields[5:],
    )
    inlines = [MemoryRevisionInline]
    actions = ["expire_now", "purge_expired"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # An expired item is invisible to every write but forget: staff see it, and may delete it.
        if obj is not None and obj.expires_at is not None and obj.expires_at <= timezone.now():
            return (*self.readonly_fields, "title", "content", "category", "tags", "expires_at")
        return self.readonly_fields

    @admin.display(description="content")
    def content_preview(self, obj: MemoryItem) -> str:
        return preview(obj.content)

    @admin.display(description="state")
    def state(self, obj: MemoryItem) -> str:
        if obj.expires_at is not None and obj.expires_at <= timezone.now():
            return "expired (hidden from the agent)"
        return "active"

    def save_model(self, request: HttpRequest, obj: MemoryItem, form: Any, change: bool) -> None:
        # Every save goes to the service, an unchanged one too: it refuses a patch with nothing in it.
        patch = {
            name: form.cleaned_data[name] for name in form.changed_data if name in MemoryItemForm.Meta.fields
        }
        stored = MemoryItem.objects.get(pk=obj.pk)
        expected = form.cleaned_data.get("expected_version") or stored.version
        result = service_call(
            services.memory_update,
            scope=service_call(scope_of_item, item=stored),
            memory_id=stored.memory_id,
            expected_version=int(expected),
            patch=patch,
            actor=services.staff_actor(request.user),
        )
        obj.version = result.memory["version"]

    def delete_model(self, request: HttpRequest, obj: MemoryItem) -> None:
        service_call(
            services.memory_forget,
            scope=service_call(scope_of_item, item=obj, orphan_ok=True),
            memory_id=obj.memory_id,
            expected_version=obj.version,
            actor=services.staff_actor(request.user),
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[MemoryItem]) -> None:
        self.run_each(
            request, queryset.order_by("pk"), lambda item: self.delete_model(request, item), "deleted"
        )

    @admin.action(description="Expire now (hide the selected items from the agent and the owner)")
    def expire_now(self, request: HttpRequest, queryset: QuerySet[MemoryItem]) -> None:
        actor = services.staff_actor(request.user)
        now = timezone.now()

        def expire(item: MemoryItem) -> None:
            services.memory_update(
                scope=scope_of_item(item),
                memory_id=item.memory_id,
                expected_version=item.version,
                patch={"expires_at": now},
                actor=actor,
            )

        active = queryset.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).order_by("pk")
        done = self.run_each(request, active, expire, "expired")
        self.message_user(
            request,
            f"Expired {done} item(s): hidden from the agent and the owner; the expiry purge deletes them.",
            messages.SUCCESS,
        )

    @admin.action(description="Purge every expired item (all namespaces)…")
    def purge_expired(self, request: HttpRequest, queryset: QuerySet[MemoryItem]) -> TemplateResponse | None:
        if confirmed(request):
            removed = services.memory_purge_expired()
            self.message_user(request, f"Purged {removed} expired item(s).", messages.SUCCESS)
            return None
        confirmation = Confirmation(
            title="Purge every expired Memory item?",
            intro="Every Memory item whose expiry has passed is deleted, in every workflow, not only the "
            "selected rows. Their revisions keep who changed them and when, without content.",
            groups=[
                Group("Every namespace", [(line.label, line.count) for line in memory_purge_inventory()])
            ],
            submit="Yes, purge them",
        )
        return confirmation_page(
            self,
            request,
            action="purge_expired",
            selected=queryset.values_list("pk", flat=True),
            confirmation=confirmation,
        )


@admin.register(MemoryNamespace)
class MemoryNamespaceAdmin(ReadOnlyMixin, ServiceAdmin):
    list_display = ("id", "owner", "workflow_id", "memory_node_id", "item_count", "created_at", "updated_at")
    list_filter = ("owner", WorkflowIdFilter)
    search_fields = ("id", "workflow_id", "memory_node_id", "owner__username")
    list_select_related = ("owner",)
    readonly_fields = (
        "id",
        "owner",
        "workflow_id",
        "memory_node_id",
        "item_count",
        "created_at",
        "updated_at",
    )
    actions = ["clear_memory"]

    @admin.action(description="Clear Memory (remove every item of the selected namespaces; Context kept)…")
    def clear_memory(
        self, request: HttpRequest, queryset: QuerySet[MemoryNamespace]
    ) -> TemplateResponse | None:
        namespaces = list(queryset.order_by("pk"))
        if not confirmed(request):
            confirmation = Confirmation(
                title="Clear Memory?",
                intro="Every item of the selected Memory namespaces is removed, expired ones too; the "
                "agents' Context is not touched.",
                groups=[
                    Group(
                        f"{namespace.workflow_id} · {namespace.memory_node_id}",
                        [(line.label, line.count) for line in memory_clear_inventory(namespace=namespace.pk)],
                    )
                    for namespace in namespaces
                ],
                submit="Yes, clear Memory",
            )
            return confirmation_page(
                self,
                request,
                action="clear_memory",
                selected=[n.pk for n in namespaces],
                confirmation=confirmation,
            )
        actor = services.staff_actor(request.user)
        cleared = {"items": 0}

        def clear(namespace: MemoryNamespace) -> None:
            cleared["items"] += services.memory_clear(
                scope=scope_of_namespace(namespace), actor=actor
            ).cleared

        done = self.run_each(request, namespaces, clear, "cleared")
        self.message_user(
            request, f"Cleared {done} namespace(s): {cleared['items']} item(s) removed.", messages.SUCCESS
        )
        return None


@admin.register(MemoryRevision)
class MemoryRevisionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = (
        "memory_id",
        "version",
        "operation",
        "content_preview",
        "actor",
        "workflow_id",
        "memory_node_id",
        "created_at",
    )
    list_filter = (RemovedFilter, "operation", WorkflowIdFilter)
    search_fields = ("title", "content", "namespace", "workflow_id", "memory_node_id", "actor")

    @admin.display(description="content")
    def content_preview(self, obj: MemoryRevision) -> str:
        return preview(obj.content)


@admin.register(MemoryReceipt)
class MemoryReceiptAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("operation_id", "operation", "workflow_id", "namespace", "created_at")
    list_filter = ("operation", WorkflowIdFilter)
    search_fields = ("operation_id", "namespace", "workflow_id")
    fields = (
        "namespace",
        "workflow_id",
        "operation_id",
        "operation",
        "fingerprint",
        "result_readable",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="result (metadata only)")
    def result_readable(self, obj: MemoryReceipt) -> str:
        return pretty_json(obj.result)


@admin.register(MemoryEmbedding)
class MemoryEmbeddingAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """A rebuildable projection (`rebuild_memory_index`); shown, never edited."""

    list_display = ("item", "namespace", "model_name", "dims", "content_hash", "updated_at")
    list_filter = ("model_name",)
    search_fields = ("item__memory_id", "namespace", "model_name")
    list_select_related = ("item",)
    fields = ("item", "namespace", "model_name", "dims", "content_hash", "updated_at")
    readonly_fields = fields
