"""Memory storage: namespaces, items, their revisions, mutation receipts and embedding projections.

The full-text projections are not model fields: PostgreSQL keeps a stored generated `tsvector`
column (`search`) and a trigram index on `memory_memoryitem`, SQLite the FTS5 tables
`memory_item_fts` and `memory_item_trigram` maintained by triggers in the same transaction as every
write. All are created by migrations (see `memory/search/postgres.py` and `memory/search/sqlite.py`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from memory.fields import ACTOR_COLUMN, CATEGORY_MAX, TITLE_MAX
from opencompany.core.ids import mint_id


def _memory_id() -> str:
    return mint_id("mem")


class IndexingState(models.TextChoices):
    LEXICAL = "lexical", "lexical (no embedder)"
    PENDING = "embedding_pending", "embedding pending"
    READY = "embedding_ready", "embedding ready"
    FAILED = "embedding_failed", "embedding failed"


class MemoryNamespace(models.Model):
    """The isolation boundary of one Memory node; created lazily by the first write.

    `item_count` counts stored items (expired ones included until purged) and is what the quota
    is checked against, in the same conditional UPDATE that reserves the slot.
    """

    id = models.CharField(primary_key=True, max_length=64)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    workflow_id = models.CharField(max_length=40, db_index=True)
    memory_node_id = models.CharField(max_length=255)
    item_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["workflow_id", "memory_node_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "workflow_id", "memory_node_id"], name="memory_namespace_unique_scope"
            ),
            models.CheckConstraint(
                condition=Q(item_count__gte=0), name="memory_namespace_count_non_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.workflow_id}/{self.memory_node_id})"


class MemoryItem(models.Model):
    id = models.BigAutoField(primary_key=True)
    memory_id = models.CharField(max_length=64, unique=True, default=_memory_id, editable=False)
    namespace = models.CharField(max_length=64)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    workflow_id = models.CharField(max_length=40, db_index=True)
    memory_node_id = models.CharField(max_length=255)
    title = models.CharField(max_length=TITLE_MAX, null=True, blank=True)  # noqa: DJ001 - null = no title
    content = models.TextField()
    category = models.CharField(max_length=CATEGORY_MAX, null=True, blank=True)  # noqa: DJ001 - null = none
    tags = models.JSONField(default=list, blank=True)
    # Normalized tags between \x1f separators: the tag filter and both FTS projections read it.
    tag_index = models.TextField(default="", blank=True, editable=False)
    version = models.PositiveIntegerField(default=1)
    expires_at = models.DateTimeField(null=True, blank=True)
    indexing_state = models.CharField(
        max_length=20, choices=IndexingState.choices, default=IndexingState.LEXICAL
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    created_by = models.CharField(max_length=ACTOR_COLUMN)
    updated_by = models.CharField(max_length=ACTOR_COLUMN)

    class Meta:
        ordering = ["namespace", "-created_at", "-id"]
        indexes = [
            models.Index(fields=["namespace", "-created_at", "-id"], name="memory_item_ns_created"),
            models.Index(fields=["namespace", "category"], name="memory_item_ns_category"),
            # Recall answers a question without searchable words with the most recently updated items.
            models.Index(fields=["namespace", "-updated_at", "-id"], name="memory_item_ns_updated"),
            models.Index(
                fields=["expires_at"], name="memory_item_expires", condition=Q(expires_at__isnull=False)
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(version__gte=1), name="memory_item_version_positive"),
            models.CheckConstraint(condition=~Q(content=""), name="memory_item_content_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} v{self.version}"


class MemoryRevision(models.Model):
    """Every applied version of every item, plus a tombstone for its removal. Outlives the item, but
    not its content: removing an item (forget, clear, expiry) erases title, content, category and tags
    from all its revisions and keeps who changed it, when, the version and the operation."""

    class Operation(models.TextChoices):
        REMEMBER = "remember", "remember"
        UPDATE = "update", "update"
        FORGET = "forget", "forget"
        CLEAR = "clear", "clear"
        EXPIRE = "expire", "purged after expiry"

    id = models.BigAutoField(primary_key=True)
    # A reference without a database constraint: revisions stay when the item is gone.
    memory = models.ForeignKey(
        MemoryItem,
        to_field="memory_id",
        db_column="memory_id",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="revisions",
    )
    namespace = models.CharField(max_length=64, db_index=True)
    workflow_id = models.CharField(max_length=40)
    memory_node_id = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    operation = models.CharField(max_length=10, choices=Operation.choices)
    title = models.CharField(max_length=TITLE_MAX, null=True, blank=True)  # noqa: DJ001 - null = no title
    content = models.TextField(null=True, blank=True)  # noqa: DJ001 - null = erased with the item
    category = models.CharField(max_length=CATEGORY_MAX, null=True, blank=True)  # noqa: DJ001 - null = none
    tags = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    actor = models.CharField(max_length=ACTOR_COLUMN)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["memory_id", "version"]
        constraints = [
            models.UniqueConstraint(fields=["memory", "version"], name="memory_revision_unique_version"),
            models.CheckConstraint(condition=Q(version__gte=1), name="memory_revision_version_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} v{self.version} {self.operation}"


class MemoryReceipt(models.Model):
    """Idempotency ledger of applied mutations: the request's fingerprint and the result's
    metadata (ids, versions, counts), never item content."""

    id = models.BigAutoField(primary_key=True)
    namespace = models.CharField(max_length=64)
    workflow_id = models.CharField(max_length=40)
    operation_id = models.CharField(max_length=512)
    operation = models.CharField(max_length=10)
    fingerprint = models.CharField(max_length=64)
    result = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "operation_id"], name="memory_receipt_unique_operation"
            )
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.operation_id}"


class MemoryEmbedding(models.Model):
    """A rebuildable vector projection of one item (float32, little-endian). Never authoritative."""

    item = models.OneToOneField(
        MemoryItem, on_delete=models.CASCADE, primary_key=True, related_name="embedding"
    )
    namespace = models.CharField(max_length=64, db_index=True)
    model_name = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    vector = models.BinaryField()
    content_hash = models.CharField(max_length=64)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace", "item_id"]
        constraints = [
            models.CheckConstraint(condition=Q(dims__gte=1), name="memory_embedding_dims_positive")
        ]

    def __str__(self) -> str:
        return f"embedding {self.item_id} ({self.model_name}, {self.dims})"
