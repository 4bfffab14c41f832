"""Input and output serializers of the conversation endpoints."""

from __future__ import annotations

from rest_framework import serializers

from conversations.models import AgentConversation
from opencompany.core.api import column_bounds


class ConversationQueryInput(serializers.Serializer):
    generation = serializers.IntegerField(
        required=False, **column_bounds(AgentConversation._meta.get_field("generation"), min_value=1)
    )
    cursor = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=100)


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
    last_input_tokens = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class MessageRowOutput(serializers.Serializer):
    seq = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    message = serializers.JSONField(source="wire")


class ConversationPageOutput(serializers.Serializer):
    workflow_id = serializers.CharField()
    generation = serializers.IntegerField()
    agent_node_id = serializers.CharField()
    length = serializers.IntegerField()
    bytes = serializers.IntegerField()
    revision = serializers.IntegerField()
    notes = NoteEntryOutput(many=True)
    notes_revision = serializers.IntegerField()
    messages = MessageRowOutput(many=True)
    next = serializers.CharField(allow_null=True)


class ClearOutput(serializers.Serializer):
    cleared = serializers.BooleanField()
    archive_id = serializers.IntegerField(allow_null=True)
    generation = serializers.IntegerField()
    agent_node_id = serializers.CharField()
    length = serializers.IntegerField()
    revision = serializers.IntegerField()
