"""Staff views of the owner chat. Rows are read-only here; ending a run, archiving a chat and purging an
archived one go through the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html

from chat.inventory import chat_purge_inventory
from chat.models import ChatFeedback, ChatMessage, ChatNote, ChatProcess, ChatRun, ChatThread, ProviderProbe
from chat.services import chat_archive, chat_end_run, chat_purge, provider_probes_forget
from opencompany.core.admin import ReadOnlyMixin, pretty_json
from opencompany.core.confirm import Confirmation, Group, confirmation_page, confirmed

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


class ArchivedFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "archived"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "current"), ("yes", "archived")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ChatThread]) -> QuerySet[ChatThread]:
        if self.value() == "yes":
            return queryset.filter(archived_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(archived_at__isnull=True)
        return queryset


@admin.register(ChatThread)
class ChatThreadAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Chats, current and archived. "New chat" archives a workflow's current chat; purging an archived
    chat deletes its rows after a confirmation page. Both go through the chat services."""

    list_display = (
        "id",
        "chat_title",
        "home_workflow",
        "owner",
        "state",
        "messages",
        "created_at",
        "archived_at",
    )
    list_select_related = ("home_workflow", "home_workflow__owner")
    list_filter = (ArchivedFilter,)
    search_fields = (
        "title",
        "home_workflow__id",
        "home_workflow__name",
        "home_workflow__owner__username",
        "active_leaf_uid",
    )
    readonly_fields = (
        "home_workflow",
        "workflow",
        "title",
        "active_leaf_uid",
        "revision",
        "created_at",
        "updated_at",
        "archived_at",
    )
    ordering = ("-created_at", "-id")
    inlines = [ChatMessageInline]
    actions = ["archive_chats", "purge_chats"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ChatThread]:
        return super().get_queryset(request).annotate(message_total=Count("messages"))

    @admin.display(description="owner")
    def owner(self, obj: ChatThread) -> str:
        return str(obj.home_workflow.owner)

    @admin.display(description="title")
    def chat_title(self, obj: ChatThread) -> str:
        return obj.title or "(from its first message)"

    @admin.display(description="state")
    def state(self, obj: ChatThread) -> str:
        return "archived" if obj.archived_at else "current"

    @admin.display(description="messages", ordering="message_total")
    def messages(self, obj: ChatThread) -> int:
        return int(getattr(obj, "message_total", 0))

    @admin.action(description="New chat: archive the selected current chats (the agents get a new mind)")
    def archive_chats(self, request: HttpRequest, queryset: QuerySet[ChatThread]) -> None:
        archived = 0
        for thread in queryset.filter(workflow__isnull=False).select_related("workflow"):
            if thread.workflow is not None and chat_archive(workflow=thread.workflow)["archived_chat_id"]:
                archived += 1
        self.message_user(request, f"Archived {archived} chat(s).", messages.SUCCESS)

    @admin.action(description="Purge the selected archived chats (delete for good)…")
    def purge_chats(self, request: HttpRequest, queryset: QuerySet[ChatThread]) -> TemplateResponse | None:
        archived = list(
            queryset.filter(archived_at__isnull=False).select_related("home_workflow").order_by("pk")
        )
        skipped = queryset.filter(archived_at__isnull=True).count()
        if confirmed(request):
            purged = sum(
                chat_purge(workflow=t.home_workflow, chat_id=t.uid, confirm=True)["purged"] for t in archived
            )
            note = f" Skipped {skipped} current chat(s): archive them first." if skipped else ""
            self.message_user(request, f"Purged {purged} archived chat(s).{note}", messages.SUCCESS)
            return None
        groups = [
            Group(
                f"Chat {t.pk} of {t.home_workflow}"
                + (f": {t.title}" if t.title else "")
                + f" (archived {t.archived_at:%Y-%m-%d %H:%M})",
                [
                    ("Archived chats", 1),
                    *((line.label, line.count) for line in chat_purge_inventory(thread=t)),
                ],
            )
            for t in archived
            if t.archived_at is not None
        ]
        notes = (
            [f"{skipped} current chat(s) will be left alone: archive them first (New chat)."]
            if skipped
            else []
        )
        confirmation = Confirmation(
            title="Purge archived chats?",
            intro="These archived chats are deleted for good, with everything below."
            if archived
            else "None of the selected chats is archived: there is nothing to purge.",
            groups=groups,
            notes=notes,
            submit="Yes, delete them for good",
            possible=bool(archived),
        )
        return confirmation_page(
            self,
            request,
            action="purge_chats",
            selected=queryset.values_list("pk", flat=True),
            confirmation=confirmation,
        )


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


@admin.register(ProviderProbe)
class ProviderProbeAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = (
        "model",
        "base_url",
        "fidelity",
        "tools",
        "json_arguments",
        "streaming_usage",
        "parallel_tool_calls",
        "probed_at",
    )
    list_filter = ("fidelity", "probed_at")
    search_fields = ("model", "base_url")
    readonly_fields = ("base_url", "model", "fidelity", "capabilities", "probed_at")
    actions = ["probe_again"]

    def _has(self, obj: ProviderProbe, name: str) -> bool:
        return bool((obj.capabilities or {}).get(name))

    @admin.display(boolean=True, description="tools")
    def tools(self, obj: ProviderProbe) -> bool:
        return self._has(obj, "tools")

    @admin.display(boolean=True, description="JSON arguments")
    def json_arguments(self, obj: ProviderProbe) -> bool:
        return self._has(obj, "json_arguments")

    @admin.display(boolean=True, description="streaming usage")
    def streaming_usage(self, obj: ProviderProbe) -> bool:
        return self._has(obj, "streaming_usage")

    @admin.display(boolean=True, description="parallel tool calls")
    def parallel_tool_calls(self, obj: ProviderProbe) -> bool:
        return self._has(obj, "parallel_tool_calls")

    @admin.action(description="Probe again on the next run")
    def probe_again(self, request: HttpRequest, queryset: QuerySet[ProviderProbe]) -> None:
        forgotten = provider_probes_forget(ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{forgotten} server(s) will be probed again.", messages.SUCCESS)


@admin.register(ChatProcess)
class ChatProcessAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("name", "role", "started_at", "beat_at")
    list_filter = ("role",)
    search_fields = ("name",)
    readonly_fields = ("name", "role", "started_at", "beat_at")


@admin.register(ChatMessage)
class ChatMessageAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """Every chat message, searchable by its text (the thread page shows them as a tree)."""

    list_display = ("uid", "workflow", "role", "kind", "status", "generation", "text_preview", "created_at")
    list_filter = ("role", "status", "kind", "thread__home_workflow__owner")
    search_fields = ("text", "uid", "run_id", "thread__home_workflow__id", "thread__home_workflow__name")
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
        return obj.thread.home_workflow_id

    @admin.display(description="text")
    def text_preview(self, obj: ChatMessage) -> str:
        return _preview(obj.text)

    @admin.display(description="meta")
    def meta_json(self, obj: ChatMessage) -> str:
        return pretty_json(obj.meta)
