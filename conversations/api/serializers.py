"""Input and output serializers of the conversation endpoints."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from conversations.models import AgentConversation
from opencompany.core.api import QueryInput, column_bounds
from opencompany.core.pagination import cursor_field, page_serializer
from opencompany.llm.fidelity import turn_fidelity


def _generation() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False,
        help_text="Defaults to the current generation.",
        **column_bounds(AgentConversation._meta.get_field("generation"), min_value=1),
    )


class GenerationQueryInput(QueryInput):
    generation = _generation()


class ConversationQueryInput(GenerationQueryInput):
    cursor = cursor_field()
    limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=100)


class ConversationListQueryInput(QueryInput):
    generation = serializers.IntegerField(
        required=False,
        help_text="Only this generation's conversations.",
        **column_bounds(AgentConversation._meta.get_field("generation"), min_value=1),
    )
    agent_node_id = serializers.CharField(
        required=False, max_length=255, help_text="Only this agent's conversations."
    )
    cursor = cursor_field()
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)


class NoteEntryOutput(serializers.Serializer):
    id = serializers.CharField()
    text = serializers.CharField()


class ConversationRowOutput(serializers.Serializer):
    generation = serializers.IntegerField()
    agent_node_id = serializers.CharField()
    length = serializers.IntegerField()
    bytes = serializers.IntegerField()
    revision = serializers.IntegerField()
    notes = NoteEntryOutput(many=True)
    notes_revision = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cache_read_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    last_input_tokens = serializers.IntegerField(
        help_text="Context pressure: the input tokens of the last request sent (as the provider reported "
        "them, cached reads counted once)."
    )
    pressure_headroom_tokens = serializers.IntegerField(help_text="The output tokens that request reserved.")
    context_window = serializers.IntegerField(help_text="The model's context window (0: no request yet).")
    pressure_estimated = serializers.BooleanField(help_text="The input count is an estimate.")
    pressure_tokens = serializers.SerializerMethodField(
        help_text="last_input_tokens + pressure_headroom_tokens: what the next request needs at least."
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_pressure_tokens(self, row: Any) -> int:
        return int(row.last_input_tokens + row.pressure_headroom_tokens) if row.context_window else 0


class TurnFidelityOutput(serializers.Serializer):
    runtime = serializers.CharField(allow_null=True, help_text="The provider runtime that wrote the turn.")
    fidelity = serializers.ChoiceField(
        choices=["provider_replayable", "portable", "observable"],
        allow_null=True,
        help_text="provider_replayable: the stored turn rebuilds that provider's next request with every "
        "continuation state it exposed; portable: only the visible conversation is kept; observable: what "
        "an agent program reported of its run, the program keeping its own state.",
    )
    epoch = serializers.IntegerField(help_text="A provider switch starts a new epoch.")


class MessageRowOutput(serializers.Serializer):
    seq = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    message = serializers.JSONField(source="wire")
    runtime = serializers.SerializerMethodField()
    fidelity = serializers.SerializerMethodField()
    epoch = serializers.SerializerMethodField()

    def _turn(self, row: Any) -> dict[str, Any]:
        wire = row.wire if isinstance(row.wire, dict) else {}
        return turn_fidelity(wire) or {"runtime": None, "fidelity": None, "epoch": None}

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_runtime(self, row: Any) -> str | None:
        return self._turn(row)["runtime"]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_fidelity(self, row: Any) -> str | None:
        return self._turn(row)["fidelity"]

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_epoch(self, row: Any) -> int | None:
        return self._turn(row)["epoch"]


class ConversationPageOutput(serializers.Serializer):
    workflow_id = serializers.CharField()
    generation = serializers.IntegerField()
    agent_node_id = serializers.CharField()
    length = serializers.IntegerField()
    bytes = serializers.IntegerField()
    revision = serializers.IntegerField()
    notes = NoteEntryOutput(many=True)
    notes_revision = serializers.IntegerField()
    fidelity = TurnFidelityOutput(
        allow_null=True,
        help_text="The badge: the latest assistant turn's runtime and epoch, and the lowest fidelity among the "
        "assistant turns the conversation holds.",
    )
    results = MessageRowOutput(many=True, help_text="The page's messages, by seq.")
    next_cursor = serializers.CharField(allow_null=True, help_text="null on the last page.")
    has_more = serializers.BooleanField()


ConversationListOutput = page_serializer("ConversationPage", ConversationRowOutput)


class UsageQueryInput(QueryInput):
    agent_node_id = serializers.CharField(required=False, max_length=255)


class UsageOutput(serializers.Serializer):
    calls = serializers.IntegerField(help_text="Provider calls: agent steps and compaction calls.")
    input_tokens = serializers.IntegerField(help_text="Whole prompts, cached reads included once.")
    cached_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=16, decimal_places=6, help_text="From the configured prices.")
    cost_complete = serializers.BooleanField(
        help_text="False when some call's model has no configured price."
    )


class RequestRecordOutput(serializers.Serializer):
    id = serializers.IntegerField()
    run_id = serializers.CharField()
    kind = serializers.CharField(help_text="step | compaction")
    status = serializers.CharField(help_text="ok | stopped | error")
    provider = serializers.CharField()
    model = serializers.CharField()
    runtime = serializers.CharField()
    fidelity = serializers.CharField()
    settings = serializers.JSONField()
    system_digest = serializers.CharField()
    notes_digest = serializers.CharField()
    tools_digest = serializers.CharField()
    message_start = serializers.IntegerField()
    message_end = serializers.IntegerField()
    conversation_digest = serializers.CharField()
    input_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    usage_reported = serializers.BooleanField()
    cost = serializers.DecimalField(max_digits=14, decimal_places=6, allow_null=True)
    created_at = serializers.DateTimeField()


RequestPageOutput = page_serializer("RequestRecordPage", RequestRecordOutput)


class RequestDetailOutput(RequestRecordOutput):
    messages = serializers.JSONField(
        allow_null=True,
        help_text="The messages the request sent, read from the stored conversation; null once that prefix "
        "is no longer stored (cleared, compacted or moved).",
    )
