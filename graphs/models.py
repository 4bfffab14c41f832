from django.conf import settings
from django.db import models
from django.db.models import Q

from graphs.constants import NODE_ID_MAX, WORKFLOW_NAME_MAX
from opencompany.core.ids import mint_id


def _workflow_id() -> str:
    return mint_id("wf")


def _outbox_id() -> str:
    return mint_id("ctxarc")


class Workflow(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=_workflow_id, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workflows")
    name = models.CharField(max_length=WORKFLOW_NAME_MAX)
    graph = models.JSONField(default=dict, blank=True)
    graph_version = models.PositiveIntegerField(default=2)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "id"]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="workflow_owner_updated")]
        constraints = [
            models.CheckConstraint(condition=Q(revision__gte=1), name="workflow_revision_positive")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"


class Deployment(models.Model):
    class State(models.TextChoices):
        LIVE = "live", "live"
        RESET = "reset", "reset"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="deployments")
    generation = models.PositiveIntegerField()
    graph = models.JSONField(default=dict, blank=True, help_text="Sanitized snapshot of the deployed graph.")
    state = models.CharField(max_length=8, choices=State.choices, default=State.LIVE)
    started_at = models.DateTimeField(auto_now_add=True)
    reset_at = models.DateTimeField(null=True, blank=True)
    reset_report = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["workflow_id", "-generation"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "generation"], name="deployment_unique_generation"),
            models.UniqueConstraint(
                fields=["workflow"], condition=Q(state="live"), name="deployment_one_live_per_workflow"
            ),
            models.CheckConstraint(condition=Q(generation__gte=1), name="deployment_generation_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id} g{self.generation} ({self.state})"


class LegacyArtifact(models.Model):
    """Immutable `legacy_partial` Markdown recovered from an old Simple Memory node's parameters."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="legacy_artifacts")
    kind = models.CharField(max_length=32, default="legacy_partial")
    memory_node_id = models.CharField(max_length=NODE_ID_MAX)
    agent_node_id = models.CharField(max_length=NODE_ID_MAX)
    context_node_id = models.CharField(max_length=NODE_ID_MAX, blank=True)
    markdown = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workflow_id", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "memory_node_id", "agent_node_id"], name="legacy_artifact_unique_pair"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.memory_node_id} -> {self.agent_node_id}"


class WorkflowTransfer(models.Model):
    """A workflow given to another owner: from whom, to whom, by which staff member, when, and what
    moved with it (the inventory counted in the same transaction). A record outlives the workflow and
    the accounts it names: the usernames are kept beside the links."""

    id = models.BigAutoField(primary_key=True)
    workflow_id = models.CharField(max_length=40, db_index=True)
    workflow_name = models.CharField(max_length=WORKFLOW_NAME_MAX)
    from_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    from_username = models.CharField(max_length=150)
    to_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    to_username = models.CharField(max_length=150)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_username = models.CharField(max_length=150)
    moved = models.JSONField(default=list, blank=True, help_text="What moved: [{app, key, label, count}].")
    tokens_stopped = models.PositiveIntegerField(
        default=0, help_text="API tokens of the old owner that stopped reaching this workflow."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.workflow_id}: {self.from_username} → {self.to_username}"


class ContextArchiveOutbox(models.Model):
    """Written in the same transaction as a graph change that removes a Context; drained by the
    registered archivers; retried until done, a failed row no sooner than `next_attempt_at` (backoff) by
    the periodic drain. Names the workflow by id, not by foreign key, so a row still pending when its
    workflow is deleted does not block the delete (the delete removes it). The `workflow_deleted` reason
    is no longer written and stays a valid choice for stored rows."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        DONE = "done", "done"

    class Reason(models.TextChoices):
        CONTEXT_REMOVED = "context_removed", "context removed"
        WORKFLOW_DELETED = "workflow_deleted", "workflow deleted"

    id = models.CharField(primary_key=True, max_length=40, default=_outbox_id, editable=False)
    workflow_id = models.CharField(max_length=40, db_index=True)
    owner_id = models.BigIntegerField(db_index=True)
    context_node_id = models.CharField(max_length=NODE_ID_MAX)
    reason = models.CharField(max_length=20, choices=Reason.choices, default=Reason.CONTEXT_REMOVED)
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="A failed row is retried from this time on (empty: at once)."
    )

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name = "Context archive outbox entry"
        verbose_name_plural = "Context archive outbox entries"
        indexes = [
            models.Index(fields=["workflow_id", "state"], name="ctxarc_workflow_state"),
            models.Index(
                fields=["next_attempt_at", "created_at"],
                name="ctxarc_pending_due",
                condition=Q(state="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.workflow_id}/{self.context_node_id} {self.state}"
