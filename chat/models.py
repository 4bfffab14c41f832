from django.db import models
from django.db.models import F, Q

from graphs.models import Workflow
from opencompany.core.ids import mint_id

LIVE_STATES = ("queued", "running", "stopping")


def new_chat_id() -> str:
    """A chat's public id: opaque and random like every id we mint (a number would tell how many chats
    the whole system holds)."""
    return mint_id("chat")


TERMINAL_STATES = ("finished", "error", "stopped")


class ChatThread(models.Model):
    """One chat of a workflow: the owner's conversation tree and where its shown path ends.

    A workflow has at most one current chat (`workflow` set) and any number of archived ones
    (`workflow` cleared, `archived_at` set), all listed under `home_workflow`. Archived chats are
    read-only: every write reaches the chat through `workflow`, so it only ever finds the current one.
    """

    uid = models.CharField(max_length=40, unique=True, default=new_chat_id, editable=False)
    # The workflow whose current chat this is; None once archived.
    workflow = models.OneToOneField(
        Workflow, null=True, blank=True, on_delete=models.CASCADE, related_name="chat_thread"
    )
    # The workflow whose chat list shows this chat, current or archived.
    home_workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="chats")
    title = models.CharField(max_length=200, blank=True, default="")
    active_leaf_uid = models.CharField(max_length=64, blank=True, default="")
    revision = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                # `workflow__isnull=False` too: a comparison with NULL is unknown, which a CHECK lets pass.
                condition=Q(workflow__isnull=False, workflow=F("home_workflow"), archived_at__isnull=True)
                | Q(workflow__isnull=True, archived_at__isnull=False),
                name="chat_thread_current_or_archived",
            ),
        ]
        indexes = [models.Index(fields=["home_workflow", "created_at"], name="chat_thread_home_created")]

    def __str__(self) -> str:
        state = "archived" if self.archived_at else "current"
        return f"{self.uid} of {self.home_workflow_id} ({state}) r{self.revision}"

    @property
    def snapshot_key(self) -> str:
        """The key branch snapshots of this thread are kept under."""
        return f"chat:{self.home_workflow_id}:{self.pk}"


class ChatMessage(models.Model):
    class Role(models.TextChoices):
        USER = "user", "owner"
        ASSISTANT = "assistant", "assistant"

    class Kind(models.TextChoices):
        TEXT = "text", "text"
        NOTICE = "notice", "notice"

    class Status(models.TextChoices):
        COMPLETE = "complete", "complete"
        STOPPED = "stopped", "stopped"
        ERROR = "error", "error"

    thread = models.ForeignKey(ChatThread, on_delete=models.CASCADE, related_name="messages")
    uid = models.CharField(max_length=64, unique=True)
    parent_uid = models.CharField(max_length=64, blank=True, default="", db_index=True)
    role = models.CharField(max_length=10, choices=Role.choices)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.TEXT)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.COMPLETE)
    text = models.TextField(blank=True)
    generation = models.PositiveIntegerField()
    run_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    client_message_id = models.CharField(max_length=100, blank=True, default="")
    error_code = models.CharField(max_length=60, blank=True, default="")
    error_message = models.CharField(max_length=500, blank=True, default="")
    meta = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "client_message_id"],
                condition=~Q(client_message_id=""),
                name="chat_message_unique_client_id",
            ),
            models.CheckConstraint(
                condition=Q(role__in=["user", "assistant"]), name="chat_message_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.uid} ({self.role})"


class ChatRun(models.Model):
    class Kind(models.TextChoices):
        MESSAGE = "message", "message"
        EDIT = "edit", "edit"
        RETRY = "retry", "retry"

    class State(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        STOPPING = "stopping", "stopping"
        FINISHED = "finished", "finished"
        ERROR = "error", "error"
        STOPPED = "stopped", "stopped"

    run_id = models.CharField(primary_key=True, max_length=64)
    thread = models.ForeignKey(ChatThread, on_delete=models.CASCADE, related_name="runs")
    workflow_id = models.CharField(max_length=40, db_index=True)
    generation = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.MESSAGE)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED, db_index=True)
    user_message_uid = models.CharField(max_length=64)
    reply_message_uid = models.CharField(max_length=64)
    parent_run_id = models.CharField(max_length=64, blank=True, default="")
    claimant = models.CharField(max_length=120, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error_code = models.CharField(max_length=60, blank=True, default="")
    error_message = models.CharField(max_length=500, blank=True, default="")
    context_cursors = models.JSONField(default=dict, blank=True)
    draft_text = models.TextField(blank=True, default="")
    draft_steps = models.JSONField(default=list, blank=True)
    last_seq = models.PositiveIntegerField(default=0)
    usage = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "run_id"]
        constraints = [
            # The lane: at most one live run per thread.
            models.UniqueConstraint(
                fields=["thread"], condition=Q(state__in=LIVE_STATES), name="chat_run_one_live_per_thread"
            ),
        ]
        indexes = [models.Index(fields=["state", "created_at"], name="chat_run_state_created")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.kind} {self.state}"

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES


class ChatNote(models.Model):
    """Something the agent should learn at the start of its next turn; a newer note with the same key
    replaces an older one (and is told again)."""

    thread = models.ForeignKey(ChatThread, on_delete=models.CASCADE, related_name="notes")
    key = models.CharField(max_length=255)
    kind = models.CharField(max_length=20)
    text = models.TextField(max_length=20_000)
    claimed_run_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["updated_at", "id"]
        constraints = [models.UniqueConstraint(fields=["thread", "key"], name="chat_note_unique_key")]

    def __str__(self) -> str:
        return f"{self.key} ({'told' if self.delivered_at else 'untold'})"


class ChatFeedback(models.Model):
    class Value(models.TextChoices):
        UP = "up", "up"
        DOWN = "down", "down"

    thread = models.ForeignKey(ChatThread, on_delete=models.CASCADE, related_name="feedback")
    message_uid = models.CharField(max_length=64)
    value = models.CharField(max_length=4, choices=Value.choices)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "chat feedback"
        verbose_name_plural = "chat feedback"
        constraints = [
            models.UniqueConstraint(fields=["thread", "message_uid"], name="chat_feedback_unique_message")
        ]

    def __str__(self) -> str:
        return f"{self.message_uid}: {self.value}"


class ProviderProbe(models.Model):
    """What an OpenAI-compatible server was verified to support for one model: the capability probe's
    answer, kept so runs reuse it instead of probing again."""

    base_url = models.CharField(max_length=500)
    model = models.CharField(max_length=200)
    capabilities = models.JSONField(
        default=dict, help_text="{tools, json_arguments, streaming_usage, parallel_tool_calls}"
    )
    fidelity = models.CharField(max_length=30)
    probed_at = models.DateTimeField()

    class Meta:
        ordering = ["base_url", "model"]
        constraints = [
            models.UniqueConstraint(fields=["base_url", "model"], name="provider_probe_unique_model")
        ]

    def __str__(self) -> str:
        return f"{self.model} at {self.base_url} ({self.fidelity})"


class ChatProcess(models.Model):
    """A process that runs the chat watchdog loop (a server, a task worker or the cron command), with
    its last heartbeat: the health endpoint counts the live ones."""

    class Role(models.TextChoices):
        SERVER = "server", "server"
        WORKER = "worker", "task worker"
        COMMAND = "command", "watchdog command"

    name = models.CharField(max_length=200, unique=True, help_text="host:pid")
    role = models.CharField(max_length=10, choices=Role.choices)
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name_plural = "chat processes"

    def __str__(self) -> str:
        return f"{self.role} {self.name}"
