"""Staff views of Memory. Edits and deletes go through the services, with the item's scope derived
by `memory_scope` like every other caller: a staff edit bumps the version, writes a revision and
publishes `memory.updated`. Receipts are read-only; items are created by agents and owners only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from graphs.models import Workflow
from memory import services
from memory.models import MemoryItem, MemoryReceipt, MemoryRevision
from memory.scope import MemoryScope, memory_scope
from opencompany.core import gate
from opencompany.core.admin import GatedJSONFormField, ReadOnlyMixin, pretty_json
from opencompany.core.errors import ApplicationError


def scope_of_item(item: MemoryItem) -> MemoryScope:
    """The item's scope, derived the one way (and checked against the namespace it is stored in)."""
    workflow = Workflow.objects.filter(pk=item.workflow_id).first()
    if workflow is None:
        raise ApplicationError("not_found", "The item's workflow no longer exists.", status=404)
    scope = memory_scope(workflow=workflow, memory_node_id=item.memory_node_id)
    if scope.namespace != item.namespace:
        raise ApplicationError("not_found", "The item does not belong to this Memory node.", status=404)
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["expected_version"].initial = self.instance.version


@admin.register(MemoryItem)
class MemoryItemAdmin(admin.ModelAdmin):
    form = MemoryItemForm
    list_display = (
        "memory_id",
        "title",
        "category",
        "version",
        "workflow_id",
        "memory_node_id",
        "expires_at",
        "updated_at",
    )
    list_filter = ("category", ExpiryFilter, "indexing_state", "namespace")
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: MemoryItem, form: Any, change: bool) -> None:
        patch = {
            name: form.cleaned_data[name] for name in form.changed_data if name in MemoryItemForm.Meta.fields
        }
        if not patch:
            return
        expected = form.cleaned_data.get("expected_version") or obj.version
        try:
            result = services.memory_update(
                scope=scope_of_item(obj),
                memory_id=obj.memory_id,
                expected_version=int(expected),
                patch=patch,
                actor=services.actor_for_user(request.user),
            )
        except ApplicationError as exc:
            self.message_user(request, f"Not saved ({exc.code}): {exc.message}", level=messages.ERROR)
            return
        obj.version = result.memory["version"]

    def delete_model(self, request: HttpRequest, obj: MemoryItem) -> None:
        services.memory_forget(
            scope=scope_of_item(obj),
            memory_id=obj.memory_id,
            expected_version=obj.version,
            actor=services.actor_for_user(request.user),
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[MemoryItem]) -> None:
        for item in queryset.order_by("pk"):
            self.delete_model(request, item)


@admin.register(MemoryRevision)
class MemoryRevisionAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = (
        "memory_id",
        "version",
        "operation",
        "actor",
        "workflow_id",
        "memory_node_id",
        "created_at",
    )
    list_filter = ("operation",)
    search_fields = ("namespace", "workflow_id", "memory_node_id", "actor")


@admin.register(MemoryReceipt)
class MemoryReceiptAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("operation_id", "operation", "workflow_id", "namespace", "created_at")
    list_filter = ("operation",)
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
