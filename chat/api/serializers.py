"""Input and output serializers of the owner-chat endpoints."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from chat.models import ChatThread
from chat.services._common import CLIENT_ID_PATTERN, MAX_MESSAGE_CHARS
from opencompany.core.api import ConfirmField, JSONInput, QueryInput, column_bounds
from opencompany.core.pagination import cursor_field, page_serializer

_REVISION = column_bounds(ChatThread._meta.get_field("revision"), min_value=0)


class StrictCharField(serializers.CharField):
    """A string and nothing else: DRF's CharField would turn `123` or `true` into text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: `"3"`, `3.0` and `true` are refused rather than coerced."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


# Text limits (blank, 50,000 characters) are the service's, so the API and the websocket refuse
# with the same codes (`invalid_request`, `message_too_long`).
@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_MESSAGE_CHARS,
        "pattern": r"\S",
        "description": "Non-blank text (`message_too_long` past the limit).",
    }
)
class MessageTextField(StrictCharField):
    """The message text; blank and over-long texts are the service's refusals."""


@extend_schema_field(
    {
        "type": "string",
        "nullable": True,
        "maxLength": 100,
        "pattern": CLIENT_ID_PATTERN.replace("{1,100}", "{0,100}"),
        "description": "Up to 100 letters, digits, `_`, `.`, `:` or `-`; a re-send with the same id and "
        "text returns the first message (empty or null: none).",
    }
)
class ClientMessageIdField(StrictCharField):
    """The client's idempotency id; its format is the service's check (`invalid_request`)."""


class SendInput(JSONInput):
    text = MessageTextField(trim_whitespace=False)
    client_message_id = ClientMessageIdField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False
    )
    expected_revision = StrictIntegerField(required=False, allow_null=True, **_REVISION)


class EditInput(SendInput):
    pass


class RetryInput(JSONInput):
    expected_revision = StrictIntegerField(required=False, allow_null=True, **_REVISION)


class SwitchInput(JSONInput):
    message_id = StrictCharField(max_length=64)
    expected_revision = StrictIntegerField(required=False, allow_null=True, **_REVISION)


class FeedbackInput(JSONInput):
    value = serializers.ChoiceField(choices=["up", "down"], allow_null=True)


class HistoryQueryInput(QueryInput):
    before = serializers.CharField(required=False, max_length=64)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)


class ErrorOutput(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class VersionsOutput(serializers.Serializer):
    index = serializers.IntegerField()
    count = serializers.IntegerField()
    ids = serializers.ListField(child=serializers.CharField())


class MessageOutput(serializers.Serializer):
    id = serializers.CharField()
    parent_id = serializers.CharField(allow_null=True)
    role = serializers.CharField()
    kind = serializers.CharField()
    status = serializers.CharField()
    text = serializers.CharField(allow_blank=True)
    generation = serializers.IntegerField()
    run_id = serializers.CharField(allow_null=True)
    run_state = serializers.CharField(allow_null=True)
    error = ErrorOutput(allow_null=True)
    created_at = serializers.DateTimeField()
    client_message_id = serializers.CharField(allow_null=True)
    feedback = serializers.CharField(allow_null=True)
    versions = VersionsOutput()
    editable = serializers.BooleanField()


class RunOutput(serializers.Serializer):
    run_id = serializers.CharField()
    kind = serializers.CharField()
    state = serializers.CharField()
    generation = serializers.IntegerField()
    user_message_id = serializers.CharField()
    reply_message_id = serializers.CharField()
    parent_run_id = serializers.CharField(allow_null=True)
    error = ErrorOutput(allow_null=True)
    created_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    last_seq = serializers.IntegerField()


class RunSnapshotOutput(RunOutput):
    seq = serializers.IntegerField()
    text = serializers.CharField(allow_blank=True)
    steps = serializers.ListField(child=serializers.DictField())


class ContextMarkOutput(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["context_cleared", "context_summarized"],
        help_text='Shown as "Context cleared" / "Earlier messages summarized".',
    )
    after_id = serializers.CharField(
        allow_null=True, help_text="The path message it follows (null: before the first)."
    )
    at = serializers.DateTimeField()


class ThreadOutput(serializers.Serializer):
    workflow_id = serializers.CharField()
    generation = serializers.IntegerField()
    revision = serializers.IntegerField()
    path = MessageOutput(many=True)
    has_more = serializers.BooleanField()
    editable = serializers.ListField(child=serializers.CharField())
    active_runs = RunOutput(many=True)
    marks = ContextMarkOutput(
        many=True, help_text="Where the agent's Context was cleared or compacted, among this page's messages."
    )


class AdmissionOutput(serializers.Serializer):
    message = MessageOutput()
    run = RunOutput()
    created = serializers.BooleanField()
    revision = serializers.IntegerField()


class FeedbackOutput(serializers.Serializer):
    message_id = serializers.CharField()
    feedback = serializers.CharField(allow_null=True)


class SwitchOutput(serializers.Serializer):
    leaf_id = serializers.CharField()
    revision = serializers.IntegerField()
    changed = serializers.BooleanField()


class ChatArchiveOutput(serializers.Serializer):
    cleared = serializers.BooleanField()
    archived_chat_id = serializers.CharField(allow_null=True)
    runs_ended = serializers.ListField(child=serializers.CharField())
    conversations_archived = serializers.IntegerField()


class ChatListQueryInput(QueryInput):
    cursor = cursor_field()
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)


class ChatOutput(serializers.Serializer):
    id = serializers.CharField()
    title = serializers.CharField()
    titled = serializers.BooleanField(help_text="False when the title is taken from the first message.")
    current = serializers.BooleanField(help_text="The chat new messages go to; the others are archived.")
    message_count = serializers.IntegerField(help_text="Every stored message, versions included.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    archived_at = serializers.DateTimeField(allow_null=True)


ChatListOutput = page_serializer("ChatPage", ChatOutput)


class ChatTranscriptOutput(serializers.Serializer):
    chat = ChatOutput()
    path = MessageOutput(many=True)


class RenameInput(JSONInput):
    title = StrictCharField(allow_blank=True, trim_whitespace=False)


class PurgeInput(JSONInput):
    confirm = ConfirmField(message="Send true to delete this chat for good.")


class PurgeOutput(serializers.Serializer):
    purged = serializers.BooleanField()
    chat_id = serializers.CharField()
    messages_deleted = serializers.IntegerField()
