"""The agent's Context: a head row per conversation key plus append-only message rows.

A key is `(workflow_id, generation, agent_node_id)`. `workflow_id` is a plain indexed string, not a
foreign key: the archive outbox drain archives the conversations of a workflow whose row is already
gone. Ownership rides on the `owner` foreign key instead.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from psycopg.types.json import Json

from opencompany.core.json import canonical_json


class CanonicalJSONField(models.JSONField):
    """A JSON column that keeps the exact canonical text written (the bytes its digest covers).

    A message is only ever stored whole and read whole, never queried inside, so nothing needs a
    parsed binary form: where the database's JSON type is `jsonb` (PostgreSQL), the column is its
    plain `json` sibling, which stores the text as it came and reads it back without re-serializing
    (docs/benchmarks.md). Elsewhere the column keeps the database's JSON type. Values written through
    the ORM are stored in the canonical form on every database.
    """

    def db_type(self, connection: Any) -> str | None:
        native = super().db_type(connection)
        return "json" if native == "jsonb" else native

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if not prepared:
            value = self.get_prep_value(value)
        if connection.data_types.get("JSONField") == "jsonb":
            # psycopg's default adapter would send jsonb, which the server re-serializes.
            return Json(value, dumps=canonical_json)
        return canonical_json(value)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if not isinstance(value, str):
            return value  # None, or a `json` column psycopg already parsed
        return super().from_db_value(value, expression, connection)


class AgentConversation(models.Model):
    """Head row: counters, the digest of the last message, usage, working notes.

    Every turn updates this row, and `updated_at` is indexed, so each of its indexes takes an entry per
    turn: it has only the three it needs. The unique key serves lookups by workflow, and
    `conversation_owner_updated` serves lookups by owner.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="agent_conversations",
        db_index=False,  # `conversation_owner_updated` starts with owner
    )
    workflow_id = models.CharField(max_length=40)  # the unique key starts with workflow_id
    generation = models.PositiveIntegerField()
    agent_node_id = models.CharField(max_length=255)
    length = models.PositiveIntegerField(default=0)
    revision = models.PositiveBigIntegerField(default=0)
    bytes = models.PositiveBigIntegerField(default=0, help_text="UTF-8 size of the canonical JSON messages.")
    head_digest = models.CharField(
        max_length=64, blank=True, default="", help_text="Chained digest of the last message ('' when empty)."
    )
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    last_input_tokens = models.PositiveBigIntegerField(
        default=0,
        help_text="Context pressure: the input tokens of the last request sent for this conversation, as "
        "the provider reported them (cached reads counted once).",
    )
    pressure_headroom_tokens = models.PositiveBigIntegerField(
        default=0, help_text="Context pressure: the output tokens that request reserved."
    )
    context_window = models.PositiveBigIntegerField(
        default=0, help_text="The context window of the model that request went to (0: none sent yet)."
    )
    pressure_estimated = models.BooleanField(
        default=False, help_text="The input count is an estimate (the provider reported none)."
    )
    notes = models.JSONField(default=list, blank=True, help_text="Working notes: [{id, text}].")
    notes_revision = models.PositiveIntegerField(default=0)
    runtime_binding = models.JSONField(
        default=dict,
        blank=True,
        help_text="The agent program's session this conversation continues: {runtime, session_id, "
        "length, digest} ({} when none). Archived with the conversation, never exported.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workflow_id", "-generation", "agent_node_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_id", "generation", "agent_node_id"], name="conversation_unique_key"
            ),
            models.CheckConstraint(condition=Q(generation__gte=1), name="conversation_generation_positive"),
            models.CheckConstraint(
                condition=Q(length=0, head_digest="") | (Q(length__gt=0) & ~Q(head_digest="")),
                name="conversation_digest_matches_length",
            ),
        ]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="conversation_owner_updated")]

    def __str__(self) -> str:
        return f"{self.workflow_id} g{self.generation} {self.agent_node_id} ({self.length} messages)"


class ConversationMessage(models.Model):
    """One message of a conversation. Rows are appended; a rewrite deletes from a seq and re-appends."""

    conversation = models.ForeignKey(
        AgentConversation,
        on_delete=models.CASCADE,
        related_name="messages",
        db_index=False,  # the unique (conversation, seq) index starts with conversation
    )
    seq = models.PositiveIntegerField()
    wire = CanonicalJSONField()
    digest = models.CharField(max_length=64, help_text="sha256(previous digest + canonical JSON of wire).")
    size = models.PositiveIntegerField(default=0, help_text="UTF-8 size of the canonical JSON.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="conversation_message_unique_seq")
        ]

    def __str__(self) -> str:
        return f"#{self.seq} of conversation {self.conversation_id}"

    @property
    def role(self) -> str:
        return str(self.wire.get("role", "")) if isinstance(self.wire, dict) else ""


class ProviderCall(models.Model):
    """One provider call of an agent: the lifetime-usage ledger row and the request record in one.

    Append-only: a row is written when the call ends (finished, stopped or failed) and never changed.
    It is keyed by plain values, not by the conversation row, so it outlives New chat, Clear Context and
    Reset. The request is recorded by reference: digests of the system prompt, the notes block and the
    tool definitions, and the range of the conversation's messages that was sent; no content.
    """

    class Kind(models.TextChoices):
        STEP = "step", "agent step"
        COMPACTION = "compaction", "compaction"

    class Status(models.TextChoices):
        OK = "ok", "ok"
        STOPPED = "stopped", "stopped"
        ERROR = "error", "error"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_calls", db_index=False
    )
    workflow_id = models.CharField(max_length=40)
    generation = models.PositiveIntegerField()
    agent_node_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.STEP)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OK)
    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=200, blank=True, default="")
    input_tokens = models.PositiveBigIntegerField(
        default=0, help_text="The whole prompt as reported (cached reads included once)."
    )
    cached_tokens = models.PositiveBigIntegerField(default=0, help_text="Part of input read from cache.")
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    usage_reported = models.BooleanField(default=True, help_text="False: the provider reported no usage.")
    cost = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True, help_text="From the configured prices."
    )
    settings = models.JSONField(default=dict, blank=True, help_text="Model settings of the request.")
    system_digest = models.CharField(max_length=64, blank=True, default="")
    notes_digest = models.CharField(max_length=64, blank=True, default="")
    tools_digest = models.CharField(max_length=64, blank=True, default="")
    message_start = models.PositiveIntegerField(default=0, help_text="First conversation seq sent.")
    message_end = models.PositiveIntegerField(default=0, help_text="One past the last seq sent.")
    conversation_digest = models.CharField(
        max_length=64, blank=True, default="", help_text="Chained digest of the last message sent."
    )
    runtime = models.CharField(max_length=40, blank=True, default="")
    fidelity = models.CharField(max_length=24, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["workflow_id", "agent_node_id", "-created_at"], name="provider_call_agent"),
            models.Index(fields=["owner", "-created_at"], name="provider_call_owner"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(message_end__gte=F("message_start")), name="provider_call_range"
            ),
            models.CheckConstraint(
                condition=Q(cost__isnull=True) | Q(cost__gte=0), name="provider_call_cost"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.provider}/{self.model} {self.workflow_id} {self.agent_node_id}"


class CompactionAttempt(models.Model):
    """One compaction of a conversation, applied or not: why, and the sizes before and after. No content."""

    class Outcome(models.TextChoices):
        APPLIED = "applied", "applied"
        REFUSED = "refused", "refused"
        FAILED = "failed", "failed"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="compaction_attempts", db_index=False
    )
    workflow_id = models.CharField(max_length=40)
    generation = models.PositiveIntegerField()
    agent_node_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=200, blank=True, default="")
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    reason = models.CharField(max_length=40, blank=True, default="")
    messages_before = models.PositiveIntegerField(default=0)
    messages_after = models.PositiveIntegerField(default=0)
    tokens_before = models.PositiveBigIntegerField(default=0)
    tokens_after = models.PositiveBigIntegerField(default=0)
    estimated = models.BooleanField(default=True, help_text="The token counts are estimates.")
    system_digest = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["workflow_id", "generation", "agent_node_id"], name="compaction_attempt_key"
            ),
            models.Index(fields=["owner", "-created_at"], name="compaction_attempt_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} {self.reason} {self.workflow_id} {self.agent_node_id}"


class ConversationArchive(models.Model):
    """A copy of a conversation taken before it was emptied (clear, reset, Context removed) or rewritten
    into its portable form when the agent moved to another provider (the old runtime's opaque state)."""

    class Reason(models.TextChoices):
        CLEARED = "cleared", "cleared"
        RESET = "reset", "reset"
        CONTEXT_REMOVED = "context_removed", "context removed"
        PROVIDER_SWITCH = "provider_switch", "provider switch"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversation_archives"
    )
    workflow_id = models.CharField(max_length=40, db_index=True)
    generation = models.PositiveIntegerField()
    agent_node_id = models.CharField(max_length=255)
    reason = models.CharField(max_length=20, choices=Reason.choices)
    messages = models.JSONField(default=list, blank=True)
    notes = models.JSONField(default=list, blank=True)
    runtime_binding = models.JSONField(
        default=dict, blank=True, help_text="The agent program's session the conversation was bound to."
    )
    length = models.PositiveIntegerField(default=0)
    bytes = models.PositiveBigIntegerField(default=0)
    revision = models.PositiveBigIntegerField(default=0, help_text="Conversation revision when archived.")
    archived_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-archived_at", "-id"]
        indexes = [
            models.Index(fields=["workflow_id", "generation", "agent_node_id"], name="conv_archive_key"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id} g{self.generation} {self.agent_node_id} ({self.reason})"


class BranchSnapshot(models.Model):
    """The messages and notes of an agent's conversation on a chat branch the owner left."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="branch_snapshots"
    )
    thread_key = models.CharField(max_length=255)
    leaf_uid = models.CharField(max_length=64)
    agent_node_id = models.CharField(max_length=255)
    workflow_id = models.CharField(max_length=40, db_index=True)
    generation = models.PositiveIntegerField()
    messages = models.JSONField(default=list, blank=True)
    notes = models.JSONField(default=list, blank=True)
    pressure = models.JSONField(
        default=dict, blank=True, help_text="The conversation's context pressure on that branch."
    )
    bytes = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["thread_key", "created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread_key", "leaf_uid", "agent_node_id"], name="branch_snapshot_key"
            )
        ]
        indexes = [models.Index(fields=["thread_key", "created_at"], name="branch_snapshot_age")]

    def __str__(self) -> str:
        return f"{self.thread_key} leaf {self.leaf_uid} {self.agent_node_id}"
