"""The conversation store through the ORM and plain SQL: runs on every database Django supports,
PostgreSQL included (the store suite runs it there too)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F

from conversations.models import AgentConversation, ConversationMessage, ProviderCall
from conversations.stores.base import (
    INSERT_BATCH,
    AppendAnswer,
    Batch,
    ConversationStore,
    Head,
    LockedAppend,
    Refused,
    check_call,
    key_params,
    load_where,
    workflow_gone,
)
from conversations.types import ConversationKey, TokenUsage
from graphs.models import Workflow


class PortableConversationStore(LockedAppend, ConversationStore):
    """Each write in one transaction (a savepoint inside a caller's), under the head row's lock."""

    def __init__(self) -> None:
        quote = connection.ops.quote_name
        self.load_sql = f"SELECT m.{quote('wire')} {load_where()} ORDER BY m.{quote('seq')}"

    def append(
        self,
        *,
        key: ConversationKey,
        expected_length: int,
        expected_digest: str | None,
        batch: Batch,
        usage: TokenUsage | None,
        now: datetime,
    ) -> AppendAnswer:
        with transaction.atomic():
            return self._append_locked(
                key=key,
                expected_length=expected_length,
                expected_digest=expected_digest,
                batch=batch,
                usage=usage,
                now=now,
            )

    def _write_locked(
        self,
        key: ConversationKey,
        row: AgentConversation,
        digests: list[str],
        batch: Batch,
        usage: TokenUsage | None,
        now: datetime,
    ) -> Head:
        ConversationMessage.objects.bulk_create(
            [
                ConversationMessage(
                    conversation=row, seq=row.length + i, wire=wire, digest=digests[i], size=batch.sizes[i]
                )
                for i, wire in enumerate(batch.wires)
            ],
            batch_size=INSERT_BATCH,
        )
        added = sum(batch.sizes)
        changes: dict[str, Any] = {
            "length": F("length") + len(batch.wires),
            "bytes": F("bytes") + added,
            "revision": F("revision") + 1,
            "updated_at": now,
        }
        if digests:
            changes["head_digest"] = digests[-1]
        if usage is not None:
            changes["input_tokens"] = F("input_tokens") + usage.input_tokens
            changes["output_tokens"] = F("output_tokens") + usage.output_tokens
            changes["cache_read_tokens"] = F("cache_read_tokens") + usage.cache_read_tokens
            changes["cache_write_tokens"] = F("cache_write_tokens") + usage.cache_write_tokens
        AgentConversation.objects.filter(pk=row.pk).update(**changes)
        # The row is locked: its counters are the ones read plus this append.
        return Head(
            owner_id=row.owner_id,
            length=row.length + len(batch.wires),
            revision=row.revision + 1,
            bytes=row.bytes + added,
            digest=digests[-1] if digests else row.head_digest,
            notes_revision=row.notes_revision,
        )

    def load(self, *, key: ConversationKey) -> list[dict[str, Any]]:
        with connection.cursor() as cursor:
            cursor.execute(self.load_sql, key_params(key))
            rows = cursor.fetchall()
        # Text columns come back as the stored JSON text; native JSON columns already parsed.
        loads = json.loads
        return [loads(value) if isinstance(value, str | bytes) else value for (value,) in rows]

    def head_lock(self, *, key: ConversationKey) -> AgentConversation | None:
        return AgentConversation.objects.select_for_update().filter(**key.filter_kwargs()).first()

    def call_record(
        self,
        *,
        call: Mapping[str, Any],
        pressure_of: ConversationKey | None,
        pressure: Mapping[str, Any],
        now: datetime,
    ) -> ProviderCall | Refused:
        check_call(call, pressure_of, pressure)
        with transaction.atomic():
            owner_id = (
                Workflow.objects.filter(pk=call["workflow_id"]).values_list("owner_id", flat=True).first()
            )
            if owner_id is None:
                return workflow_gone()
            row = ProviderCall.objects.create(owner_id=owner_id, **call)
            if pressure_of is not None:
                AgentConversation.objects.filter(
                    **pressure_of.filter_kwargs(), head_digest=call["conversation_digest"]
                ).update(**pressure)
        return row
