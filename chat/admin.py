"""Staff views of the owner chat. Rows are read-only here; ending a run goes through the service."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from chat.models import ChatFeedback, ChatMessage, ChatNote, ChatRun, ChatThread
from chat.services import chat_end_run
from opencompany.core.admin import ReadOnlyMixin, pretty_json

PREVIEW_CHARS = 120


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


class ChatMessageInline(ReadOnlyMixin, admin.TabularInline):
    """The thread's messages in tree order: each under its parent, indented by depth."""

    model = ChatMessage
    fields = ("tree", "role", "status", "generation", "run_id", "preview", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[ChatMessage]:
        return super().get_queryset(request).order_by("id")

    @admin.display(description="message (by parent)")
    def tree(self, obj: ChatMessage) -> str:
        depth = 0
        # One query per thread, not per row (inline instances live for one request).
        cache: dict[int, dict[str, str]] = self.__dict__.setdefault("_parents", {})
        if obj.thread_id not in cache:
            cache[obj.thread_id] = dict(
                ChatMessage.objects.filter(thread_id=obj.thread_id).values_list("uid", "parent_uid")
            )
        parents = cache[obj.thread_id]
        seen: set[str] = set()
        current = obj.parent_uid
        while current and current not in seen and current in parents:
            seen.add(current)
            depth += 1
            current = parents[current]
        return format_html("{}{} <small>← {}</small>", "· " * depth, obj.uid, obj.parent_uid or "root")

    @admin.display(description="text")
    def preview(self, obj: ChatMessage) -> str:
        return _preview(obj.text)


@admin.register(ChatThread)
class ChatThreadAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("workflow", "owner", "active_leaf_uid", "revision", "updated_at")
    list_select_related = ("workflow", "workflow__owner")
    search_fields = ("workflow__id", "workflow__name", "workflow__owner__username", "active_leaf_uid")
    readonly_fields = ("workflow", "active_leaf_uid", "revision", "created_at", "updated_at")
    inlines = [ChatMessageInline]

    @admin.display(description="owner")
    def owner(self, obj: ChatThread) -> str:
        return str(obj.workflow.owner)


@admin.register(ChatRun)
class ChatRunAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = (
        "run_id",
        "workflow_id",
        "generation",
        "kind",
        "state",
        "error_code",
        "created_at",
        "finished_at",
    )
    list_filter = ("state", "kind", "error_code")
    search_fields = ("run_id", "workflow_id", "user_message_uid", "claimant")
    ordering = ("-created_at",)
    actions = ["end_runs"]
    fields = (
        "run_id",
        "thread",
        "workflow_id",
        "generation",
        "kind",
        "state",
        "user_message_uid",
        "reply_message_uid",
        "parent_run_id",
        "claimant",
        "heartbeat_at",
        "error_code",
        "error_message",
        "cursors",
        "draft_text",
        "steps",
        "last_seq",
        "usage_json",
        "created_at",
        "started_at",
        "stop_requested_at",
        "finished_at",
    )
    readonly_fields = fields

    @admin.display(description="context cursors")
    def cursors(self, obj: ChatRun) -> str:
        return pretty_json(obj.context_cursors)

    @admin.display(description="draft steps")
    def steps(self, obj: ChatRun) -> str:
        return pretty_json(obj.draft_steps)

    @admin.display(description="usage")
    def usage_json(self, obj: ChatRun) -> str:
        return pretty_json(obj.usage)

    @admin.action(description="End selected live runs (stopped)")
    def end_runs(self, request: HttpRequest, queryset: QuerySet[ChatRun]) -> None:
        ended = sum(
            chat_end_run(run_id=run_id) is not None for run_id in queryset.values_list("run_id", flat=True)
        )
        self.message_user(request, f"Ended {ended} run(s).", messages.SUCCESS)


@admin.register(ChatNote)
class ChatNoteAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("key", "kind", "thread", "claimed_run_id", "delivered_at", "updated_at")
    list_filter = ("kind",)
    search_fields = ("key", "claimed_run_id", "thread__workflow__id")
    readonly_fields = (
        "thread",
        "key",
        "kind",
        "text",
        "claimed_run_id",
        "claimed_at",
        "delivered_at",
        "created_at",
        "updated_at",
    )


@admin.register(ChatFeedback)
class ChatFeedbackAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("message_uid", "value", "thread", "updated_at")
    list_filter = ("value",)
    search_fields = ("message_uid", "thread__workflow__id")
    readonly_fields = ("thread", "message_uid", "value", "updated_at")


@admin.register(ChatMessage)
class ChatMessageAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Every chat message, searchable by its text (the thread page shows them as a tree)."""

    list_display = ("uid", "workflow", "role", "kind", "status", "generation", "text_preview", "created_at")
    list_filter = ("role", "status", "kind", "thread__workflow__owner")
    search_fields = ("text", "uid", "run_id", "thread__workflow__id", "thread__workflow__name")
    list_select_related = ("thread",)
    fields = (
        "thread",
        "uid",
        "parent_uid",
        "role",
        "kind",
        "status",
        "generation",
        "run_id",
        "client_message_id",
        "error_code",
        "error_message",
        "text",
        "meta_json",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="workflow")
    def workflow(self, obj: ChatMessage) -> str:
        return obj.thread.workflow_id

    @admin.display(description="text")
    def text_preview(self, obj: ChatMessage) -> str:
        return _preview(obj.text)

    @admin.display(description="meta")
    def meta_json(self, obj: ChatMessage) -> str:
        return pretty_json(obj.meta)
