"""Staff views of the conversation store. Read-only; writes (Clear Context, the archive purge) run as
actions through their services, each after a page counting what it removes. Staff search finds message
text inside the stored JSON."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.db.models.fields.json import KeyTransform
from django.http import HttpRequest
from django.template.response import TemplateResponse

from conversations.inventory import archive_purge_inventory, conversation_clear_inventory
from conversations.models import (
    AgentConversation,
    BranchSnapshot,
    CompactionAttempt,
    ConversationArchive,
    ConversationMessage,
    ProviderCall,
)
from conversations.selectors import PRESSURE_FIELDS, conversation_fidelity
from conversations.services import archive_purge, conversation_clear
from conversations.types import ConversationKey
from opencompany.core.admin import ReadOnlyMixin, WorkflowIdFilter, pretty_json, search_json_text
from opencompany.core.confirm import Confirmation, Group, confirmation_page, confirmed
from opencompany.llm.fidelity import turn_fidelity
from opencompany.llm.wire import text_of, tool_calls_of

PREVIEW_CHARS = 160


def message_preview(wire: Any) -> str:
    """A one-line readable preview of a wire message: its text, else its tool calls."""
    if not isinstance(wire, dict):
        return ""
    text = " ".join(text_of(wire).split())
    if not text:
        calls = [c.get("name", "?") for c in tool_calls_of(wire)]
        text = f"[tool calls: {', '.join(calls)}]" if calls else ""
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _label(turn: dict[str, Any]) -> str:
    return f"{turn['runtime'] or 'unknown'} · {turn['fidelity'] or 'not recorded'} · epoch {turn['epoch']}"


def fidelity_label(wire: Any) -> str:
    """`runtime · fidelity · epoch N` of an assistant turn, "" for other messages."""
    turn = turn_fidelity(wire) if isinstance(wire, dict) else None
    return _label(turn) if turn is not None else ""


class ReadOnlyAdmin(ReadOnlyMixin, admin.ModelAdmin):
    json_search_field: str | None = None

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        if self.json_search_field and search_term.strip():
            in_text = search_json_text(queryset, self.json_search_field, search_term.strip())
            found = found | queryset.filter(pk__in=in_text.values("pk"))
        return found, may_have_duplicates


class ConversationMessageInline(admin.TabularInline):
    model = ConversationMessage
    fields = ("seq", "role", "preview", "fidelity", "size", "digest", "created_at")
    readonly_fields = fields
    ordering = ("seq",)
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="role")
    def role(self, obj: ConversationMessage) -> str:
        return obj.role

    @admin.display(description="preview")
    def preview(self, obj: ConversationMessage) -> str:
        return message_preview(obj.wire)

    @admin.display(description="runtime · fidelity")
    def fidelity(self, obj: ConversationMessage) -> str:
        return fidelity_label(obj.wire)


@admin.register(AgentConversation)
class AgentConversationAdmin(ReadOnlyAdmin):
    list_display = (
        "workflow_id",
        "generation",
        "agent_node_id",
        "owner",
        "length",
        "bytes",
        "revision",
        "notes_count",
        "updated_at",
    )
    list_filter = ("owner", WorkflowIdFilter, "generation", "updated_at")
    search_fields = ("workflow_id", "agent_node_id", "owner__username")
    list_select_related = ("owner",)
    readonly_fields = (
        "owner",
        "workflow_id",
        "generation",
        "agent_node_id",
        "length",
        "bytes",
        "revision",
        "head_digest",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        *PRESSURE_FIELDS,
        "current_fidelity",
        "notes_pretty",
        "notes_revision",
        "created_at",
        "updated_at",
    )
    exclude = ("notes",)
    inlines = [ConversationMessageInline]
    actions = ["clear_conversations"]

    @admin.display(description="notes")
    def notes_count(self, obj: AgentConversation) -> int:
        return len(obj.notes or [])

    @admin.display(description="notes")
    def notes_pretty(self, obj: AgentConversation) -> str:
        return pretty_json(obj.notes)

    @admin.display(description="runtime · lowest fidelity held")
    def current_fidelity(self, obj: AgentConversation) -> str:
        key = ConversationKey(
            workflow_id=obj.workflow_id, generation=obj.generation, agent_node_id=obj.agent_node_id
        )
        turn = conversation_fidelity(key=key)
        return _label(turn) if turn is not None else "no assistant turn yet"

    @admin.action(
        description="Clear Context (archive, then empty) of the selected conversations; Memory kept…"
    )
    def clear_conversations(
        self, request: HttpRequest, queryset: QuerySet[AgentConversation]
    ) -> TemplateResponse | None:
        keys = [
            ConversationKey(
                workflow_id=row.workflow_id, generation=row.generation, agent_node_id=row.agent_node_id
            )
            for row in queryset.order_by("workflow_id", "generation", "agent_node_id")
        ]
        if not confirmed(request):
            confirmation = Confirmation(
                title="Clear Context?",
                intro="Each selected conversation is copied into an archive, then emptied: the agent "
                "starts its next turn with no earlier messages and no working notes. Memory is not touched.",
                groups=[
                    Group(
                        f"{key.workflow_id} · generation {key.generation} · {key.agent_node_id}",
                        [(line.label, line.count) for line in conversation_clear_inventory(key=key)],
                    )
                    for key in keys
                ],
                notes=[
                    f"Archives are kept for {settings.OPENCOMPANY_CONTEXT_ARCHIVE_DAYS} days, then purged."
                ],
                submit="Yes, clear Context",
            )
            return confirmation_page(
                self,
                request,
                action="clear_conversations",
                selected=queryset.values_list("pk", flat=True),
                confirmation=confirmation,
            )
        cleared = sum(int(conversation_clear(key=key).cleared) for key in keys)
        self.message_user(request, f"Cleared {cleared} conversation(s).", messages.SUCCESS)
        return None


@admin.register(ConversationMessage)
class ConversationMessageAdmin(ReadOnlyAdmin):
    list_display = ("conversation", "seq", "role", "preview", "fidelity", "size", "created_at")
    list_select_related = ("conversation",)
    list_filter = ("conversation__owner", "conversation__generation")
    search_fields = ("conversation__workflow_id", "conversation__agent_node_id", "digest")
    json_search_field = "wire"
    readonly_fields = (
        "conversation",
        "seq",
        "role",
        "fidelity",
        "digest",
        "size",
        "created_at",
        "wire_pretty",
    )
    exclude = ("wire",)
    ordering = ("conversation_id", "seq")

    @admin.display(description="preview")
    def preview(self, obj: ConversationMessage) -> str:
        return message_preview(obj.wire)

    @admin.display(description="runtime · fidelity")
    def fidelity(self, obj: ConversationMessage) -> str:
        return fidelity_label(obj.wire)

    @admin.display(description="wire")
    def wire_pretty(self, obj: ConversationMessage) -> str:
        return pretty_json(obj.wire)


@admin.register(ConversationArchive)
class ConversationArchiveAdmin(ReadOnlyAdmin):
    list_display = (
        "workflow_id",
        "generation",
        "agent_node_id",
        "owner",
        "reason",
        "first_message",
        "length",
        "bytes",
        "archived_at",
    )
    list_filter = ("reason", "owner", WorkflowIdFilter, "archived_at")
    search_fields = ("workflow_id", "agent_node_id", "owner__username")
    json_search_field = "messages"
    list_select_related = ("owner",)
    readonly_fields = (
        "owner",
        "workflow_id",
        "generation",
        "agent_node_id",
        "reason",
        "length",
        "bytes",
        "revision",
        "archived_at",
        "messages_pretty",
        "notes_pretty",
    )
    exclude = ("messages", "notes")
    actions = ["purge_expired"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ConversationArchive]:
        # The list reads only each archive's first message, not the whole transcript.
        return (
            super()
            .get_queryset(request)
            .defer("messages", "notes")
            .annotate(first_wire=KeyTransform("0", "messages"))
        )

    @admin.display(description="first message")
    def first_message(self, obj: ConversationArchive) -> str:
        return message_preview(getattr(obj, "first_wire", None))

    @admin.display(description="messages")
    def messages_pretty(self, obj: ConversationArchive) -> str:
        return pretty_json(obj.messages)

    @admin.display(description="notes")
    def notes_pretty(self, obj: ConversationArchive) -> str:
        return pretty_json(obj.notes)

    @admin.action(description="Purge archives older than the retention window…")
    def purge_expired(
        self, request: HttpRequest, queryset: QuerySet[ConversationArchive]
    ) -> TemplateResponse | None:
        if confirmed(request):
            deleted = archive_purge()
            self.message_user(
                request, f"Purged {deleted} archive(s) past the retention window.", messages.SUCCESS
            )
            return None
        confirmation = Confirmation(
            title="Purge old Context archives?",
            intro="Every Context archive older than the retention window is deleted for good, in every "
            "workflow, not only the selected rows.",
            groups=[
                Group("Every workflow", [(line.label, line.count) for line in archive_purge_inventory()])
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


@admin.register(BranchSnapshot)
class BranchSnapshotAdmin(ReadOnlyAdmin):
    list_display = (
        "thread_key",
        "leaf_uid",
        "agent_node_id",
        "workflow_id",
        "generation",
        "bytes",
        "created_at",
    )
    list_filter = ("owner", WorkflowIdFilter, "generation")
    search_fields = ("thread_key", "leaf_uid", "agent_node_id", "workflow_id")
    readonly_fields = (
        "owner",
        "thread_key",
        "leaf_uid",
        "agent_node_id",
        "workflow_id",
        "generation",
        "bytes",
        "created_at",
        "messages_pretty",
        "notes_pretty",
    )
    exclude = ("messages", "notes")

    @admin.display(description="messages")
    def messages_pretty(self, obj: BranchSnapshot) -> str:
        return pretty_json(obj.messages)

    @admin.display(description="notes")
    def notes_pretty(self, obj: BranchSnapshot) -> str:
        return pretty_json(obj.notes)


@admin.register(ProviderCall)
class ProviderCallAdmin(ReadOnlyAdmin):
    """The lifetime-usage ledger and request records: counts and digests, no content."""

    list_display = (
        "created_at",
        "workflow_id",
        "generation",
        "agent_node_id",
        "kind",
        "status",
        "provider",
        "model",
        "input_tokens",
        "cached_tokens",
        "output_tokens",
        "cost",
        "fidelity",
    )
    list_filter = ("owner", WorkflowIdFilter, "kind", "status", "provider", "created_at")
    search_fields = ("workflow_id", "agent_node_id", "run_id", "model")
    list_select_related = ("owner",)
    readonly_fields = (
        *(f.name for f in ProviderCall._meta.fields if f.name not in {"id", "settings"}),
        "settings_pretty",
    )
    exclude = ("settings",)

    @admin.display(description="settings")
    def settings_pretty(self, obj: ProviderCall) -> str:
        return pretty_json(obj.settings)


@admin.register(CompactionAttempt)
class CompactionAttemptAdmin(ReadOnlyAdmin):
    """Compactions, applied or not: why, and the sizes before and after. No content."""

    list_display = (
        "created_at",
        "workflow_id",
        "generation",
        "agent_node_id",
        "outcome",
        "reason",
        "messages_before",
        "messages_after",
        "tokens_before",
        "tokens_after",
    )
    list_filter = ("owner", WorkflowIdFilter, "outcome", "reason", "created_at")
    search_fields = ("workflow_id", "agent_node_id", "run_id")
    list_select_related = ("owner",)
    readonly_fields = tuple(f.name for f in CompactionAttempt._meta.fields if f.name != "id")
