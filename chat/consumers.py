"""The owner's chat websocket: `/ws/chat/<workflow_id>/`.

Thin: authorize (on connect and on every frame), validate the frame, call a service through
`database_sync_to_async`, answer `ack`/`error` with the client's `request_id`. Events from the
`chat.<workflow_id>` and `owner.<user_id>` groups are forwarded as frames. The protocol is documented
in docs/chat-protocol.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import weakref
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db.models import Field

from chat import services
from chat.models import TERMINAL_STATES, ChatRun, ChatThread
from chat.selectors import chat_history, render_run_snapshot
from graphs.selectors import workflow_for_owner
from graphs.services import TRANSFERRED_EVENT
from opencompany.core import gate, lifecycle
from opencompany.core.asyncdb import db_call
from opencompany.core.errors import NOT_FOUND, ApplicationError, internal_error, render_error
from opencompany.core.events import chat_group, owner_group, remember_serving_loop
from opencompany.core.lifecycle import wait_until
from opencompany.core.tokens import AUTH_REVOKED_EVENT, session_digest
from opencompany.core.unavailable import transient_database_error, unavailable_error

logger = logging.getLogger(__name__)

MAX_FRAME_BYTES = 64 * 1024
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_TRANSFERRED = 4410
# This server is shutting down; the page reconnects at once. (RFC 6455's own 1012, "service restart",
# is not one an application may send; 4012 mirrors it.)
CLOSE_SERVER_RESTARTING = 4012
OWNER_EVENTS = (
    "context.updated",
    "memory.updated",
    "workflow.updated",
    "workflow.deployed",
    "workflow.reset",
    "workflow.deleted",
)
RESUME_WAIT_S = 3.0
CLOSE_WAIT_S = 2.0


# The sockets this process serves, so a shutdown can close each with `CLOSE_SERVER_RESTARTING`.
_open_sockets: weakref.WeakSet[ChatConsumer] = weakref.WeakSet()


async def sockets_close_for_restart(deadline: float) -> None:
    """Shutdown step: close every chat socket of this process with 4012 (the page reconnects, to
    another server or to this one restarted)."""
    sockets = list(_open_sockets)
    for socket in sockets:
        await socket.close(code=CLOSE_SERVER_RESTARTING)
    # The close frames leave only while the process still runs: wait for the clients' answers (each
    # socket's disconnect), briefly.
    await wait_until(lambda: not _open_sockets, time.monotonic() + CLOSE_WAIT_S)
    logger.warning("shutdown: closed %d chat socket(s) for the restart", len(sockets))


class WorkflowGone(ApplicationError):
    """The socket's workflow no longer exists for this user: the socket is closed 4404."""


class _Bucket:
    """Per-socket token bucket: `rate` tokens per second, bursts up to `burst`."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, time.monotonic()

    def take(self, amount: float = 1) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < amount:
            return False
        self.tokens -= amount
        return True


def _error(error: ApplicationError, request_id: Any = None) -> dict[str, Any]:
    """The error frame: the shared error body with the client's `request_id`."""
    return {"type": "error", "request_id": request_id, **render_error(error)}


_COLUMNS: dict[str, Field[Any, Any] | str] = {
    "expected_revision": ChatThread._meta.get_field("revision"),
    "after_seq": ChatRun._meta.get_field("last_seq"),
    "limit": "PositiveIntegerField",
}


def _int_or_none(value: Any, field: str) -> int | None:
    return gate.optional_integer(value, field=field, column=_COLUMNS[field])


def _optional_str(frame: dict[str, Any], field: str, *, max_len: int = 200) -> str | None:
    value = frame.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise ApplicationError(
            "invalid_request", f"'{field}' must be a string.", {"fields": {field: ["Required string."]}}
        )
    return value


def _str(frame: dict[str, Any], field: str, *, max_len: int = 200) -> str:
    value = frame.get(field)
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise ApplicationError(
            "invalid_request", f"'{field}' must be a string.", {"fields": {field: ["Required string."]}}
        )
    return value


_REQUEST_ID = re.compile(r'"request_id"\s*:\s*(?:"([^"\\\x00-\x1f]{1,100})"|(-?\d{1,18})\b)')


def _request_id_seen(raw: str | None) -> Any:
    """The `request_id` a frame seems to carry, found without parsing it (a refusal that must not cost
    a parse still lets the client match it); None when none is seen."""
    match = _REQUEST_ID.search(raw) if raw else None
    if match is None:
        return None
    return match.group(1) if match.group(1) is not None else int(match.group(2))


def _request_id_of(raw: str) -> Any:
    """The `request_id` of a frame the gate refused, when a shallow, well-formed frame carries a
    plain one (so the client can match the error); None otherwise."""
    try:
        gate.check_raw_depth(raw, max_depth=2)
        frame = json.loads(raw)
    except (ApplicationError, ValueError):
        return None
    request_id = frame.get("request_id") if isinstance(frame, dict) else None
    ok = isinstance(request_id, str | int) and gate.bad_char_message(str(request_id)) is None
    return request_id if ok else None


class ChatConsumer(AsyncWebsocketConsumer):
    groups: list[str] = []

    async def connect(self) -> None:
        remember_serving_loop(asyncio.get_running_loop())
        self.workflow_id = str(self.scope["url_route"]["kwargs"]["workflow_id"])
        self.user = self.scope.get("user")
        self.bucket = _Bucket(
            float(settings.OPENCOMPANY_WS_FRAMES_PER_S), float(settings.OPENCOMPANY_WS_FRAME_BURST)
        )
        self.bytes = _Bucket(
            float(settings.OPENCOMPANY_WS_BYTES_PER_S), float(settings.OPENCOMPANY_WS_BYTE_BURST)
        )
        self.resuming: dict[str, list[dict[str, Any]]] = {}
        self.first_seq: dict[str, int] = {}
        self.sent_seq: dict[str, int] = {}  # per run, the last event seq this socket was sent
        self.joined: list[str] = []
        session = self.scope.get("session")
        self.session_digest = session_digest(getattr(session, "session_key", None))
        await self.accept()
        if lifecycle.draining():
            await self.close(code=CLOSE_SERVER_RESTARTING)
            return
        if self.user is None or not self.user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await self._owns():
            await self.close(code=CLOSE_NOT_FOUND)
            return
        _open_sockets.add(self)
        for group in (chat_group(self.workflow_id), owner_group(self.user.pk)):
            await self.channel_layer.group_add(group, self.channel_name)
            self.joined.append(group)
        history = await db_call(self._history)(None, 50)
        await self._send({"type": "thread", "request_id": None, **history})

    async def disconnect(self, code: int) -> None:
        _open_sockets.discard(self)
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.joined = []

    # --- inbound ----------------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Every frame, well-formed or not, pays for itself before it is parsed: one frame of the
        # socket's rate, and its size in bytes of its byte budget.
        size = len(text_data.encode("utf-8")) if text_data is not None else len(bytes_data or b"")
        if not self.bucket.take() or not self.bytes.take(min(size, self.bytes.burst)):
            limited = ApplicationError("rate_limited", "Too many frames; slow down.")
            await self._send(
                _error(limited, _request_id_seen(text_data if size <= MAX_FRAME_BYTES else None))
            )
            return
        if size > MAX_FRAME_BYTES:
            await self._send(
                _error(ApplicationError("too_large", f"A frame may be at most {MAX_FRAME_BYTES} bytes."))
            )
            return
        raw = text_data if text_data is not None else (bytes_data or b"").decode("utf-8", "replace")
        try:
            frame = gate.loads(raw, field="frame")
        except ApplicationError as exc:
            await self._send(_error(exc, _request_id_of(raw)))
            return
        if not isinstance(frame, dict):
            await self._send(_error(ApplicationError("invalid_request", "A frame must be a JSON object.")))
            return
        request_id = frame.get("request_id")
        handler = (
            getattr(self, f"op_{frame.get('type')}", None) if isinstance(frame.get("type"), str) else None
        )
        if handler is None:
            await self._send(
                _error(
                    ApplicationError("invalid_request", f"Unknown frame type {frame.get('type')!r}."),
                    request_id,
                )
            )
            return
        try:
            # Ownership is checked inside each operation's database call (`_workflow`), so a frame
            # costs one round trip to the thread pool, not two.
            result = await handler(frame)
        except WorkflowGone:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        except ApplicationError as exc:
            await self._send(_error(exc, request_id))
            return
        except Exception as exc:
            if transient_database_error(exc):
                logger.warning("chat frame met an unavailable database type=%s", frame.get("type"))
                await self._send(_error(unavailable_error(), request_id))
                return
            logger.exception("chat frame failed type=%s workflow=%s", frame.get("type"), self.workflow_id)
            await self._send(_error(internal_error(), request_id))
            return
        if result is not None:
            await self._send({"type": "ack", "request_id": request_id, **result})

    async def op_send(self, frame: dict[str, Any]) -> dict[str, Any]:
        try:
            # The service checks ownership itself (inside its one statement on the common path); its
            # only `not_found` is the workflow's.
            admission = await db_call(services.chat_send)(
                owner_id=self.user.pk,
                workflow_id=self.workflow_id,
                text=frame.get("text"),
                client_message_id=_optional_str(frame, "client_message_id", max_len=100),
                expected_revision=_int_or_none(frame.get("expected_revision"), "expected_revision"),
            )
        except ApplicationError as exc:
            if exc.code == NOT_FOUND:
                raise WorkflowGone(exc.code, exc.message, status=exc.status) from exc
            raise
        return self._admission(admission)

    async def op_edit(self, frame: dict[str, Any]) -> dict[str, Any]:
        admission = await db_call(self._call)(
            services.chat_edit,
            message_uid=_str(frame, "message_id", max_len=64),
            text=frame.get("text"),
            expected_revision=_int_or_none(frame.get("expected_revision"), "expected_revision"),
            client_message_id=_optional_str(frame, "client_message_id", max_len=100),
        )
        return self._admission(admission)

    async def op_retry(self, frame: dict[str, Any]) -> dict[str, Any]:
        admission = await db_call(self._call)(
            services.chat_retry,
            message_uid=_str(frame, "message_id", max_len=64),
            expected_revision=_int_or_none(frame.get("expected_revision"), "expected_revision"),
        )
        return self._admission(admission)

    async def op_switch(self, frame: dict[str, Any]) -> dict[str, Any]:
        return await db_call(self._call)(
            services.chat_switch,
            message_uid=_str(frame, "message_id", max_len=64),
            expected_revision=_int_or_none(frame.get("expected_revision"), "expected_revision"),
        )

    async def op_stop(self, frame: dict[str, Any]) -> dict[str, Any]:
        run = await db_call(self._call)(services.chat_stop, run_id=_str(frame, "run_id", max_len=64))
        return {"run_id": run.run_id, "state": run.state}

    async def op_feedback(self, frame: dict[str, Any]) -> dict[str, Any]:
        return await db_call(self._call)(
            services.chat_feedback,
            message_uid=_str(frame, "message_id", max_len=64),
            value=frame.get("value"),
        )

    async def op_history(self, frame: dict[str, Any]) -> None:
        limit = _int_or_none(frame.get("limit"), "limit") or 50
        history = await db_call(self._history)(
            _optional_str(frame, "before", max_len=64), max(1, min(limit, 200))
        )
        await self._send({"type": "thread", "request_id": frame.get("request_id"), **history})
        return

    async def op_resume(self, frame: dict[str, Any]) -> None:
        """Snapshot from the run row, then only later events: no text lost or doubled."""
        run_id = _str(frame, "run_id", max_len=64)
        _int_or_none(frame.get("after_seq"), "after_seq")
        self.resuming.setdefault(run_id, [])
        try:
            deadline = time.monotonic() + RESUME_WAIT_S
            while True:
                snapshot = await db_call(self._snapshot)(run_id)
                first = self.first_seq.get(run_id)
                consistent = first is None or snapshot["seq"] >= first - 1
                if snapshot["state"] in TERMINAL_STATES or consistent or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            await self._send({"type": "run.snapshot", "request_id": frame.get("request_id"), **snapshot})
            self.sent_seq[run_id] = max(self.sent_seq.get(run_id, 0), snapshot["seq"])
            for event in sorted(self.resuming.get(run_id, []), key=lambda e: e.get("seq", 0)):
                if event.get("seq", 0) > self.sent_seq[run_id]:
                    self.sent_seq[run_id] = event["seq"]
                    await self._send(event)
        finally:
            self.resuming.pop(run_id, None)
        return

    async def op_ping(self, frame: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True}

    # --- outbound ---------------------------------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Group events go straight to `app_event`. Channels' dispatch first closes stale database
        connections through a thread-pool hop, once per message; forwarding an event touches no
        database (every database call here goes through `db_call`, which does that itself), and that
        hop per streamed event was most of the serving pool's work under load."""
        if message.get("type") == "app.event":
            await self.app_event(message)
            return
        await super().dispatch(message)

    async def app_event(self, message: dict[str, Any]) -> None:
        """Group events → frames. Owner-group events are forwarded only for this workflow."""
        event, data = message.get("event", ""), dict(message.get("data") or {})
        if event == AUTH_REVOKED_EVENT:
            # A logout closes the sockets of its session; a password change (no session named) all.
            if data.get("session") in (None, self.session_digest):
                await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if event == TRANSFERRED_EVENT:
            # The workflow has a new owner: every other user's socket on it closes, saying why.
            if data.get("workflow_id") == self.workflow_id and data.get("owner_id") != self.user.pk:
                await self.close(code=CLOSE_TRANSFERRED)
            return
        if event in OWNER_EVENTS and data.get("workflow_id") != self.workflow_id:
            return
        frame = {"type": event, **data}
        run_id = data.get("run_id")
        if event.startswith("run.") and isinstance(run_id, str):
            seq = int(data.get("seq") or 0)
            if seq and seq <= self.sent_seq.get(run_id, 0):
                return  # sent already: a publish that timed out reached Redis after all
            self.first_seq.setdefault(run_id, seq)
            if run_id in self.resuming:
                self.resuming[run_id].append(frame)
                return
            self.sent_seq[run_id] = seq
        await self._send(frame)

    async def _send(self, frame: dict[str, Any]) -> None:
        try:
            await self.send(text_data=json.dumps(frame, default=str))
        except Exception:
            logger.debug("send on a closed socket workflow=%s", self.workflow_id)

    # --- sync helpers (database) ------------------------------------------------------------------

    def _workflow(self) -> Any:
        try:
            return workflow_for_owner(owner=self.user, workflow_id=self.workflow_id)
        except ApplicationError as exc:
            raise WorkflowGone(exc.code, exc.message, status=exc.status) from exc

    @db_call
    def _owns(self) -> bool:
        try:
            self._workflow()
        except ApplicationError:
            return False
        return True

    def _call(self, service: Any, **kwargs: Any) -> Any:
        return service(workflow=self._workflow(), **kwargs)

    def _history(self, before: str | None, limit: int) -> dict[str, Any]:
        return chat_history(workflow=self._workflow(), before=before, limit=limit)

    def _snapshot(self, run_id: str) -> dict[str, Any]:
        workflow = self._workflow()
        run = ChatRun.objects.filter(run_id=run_id, workflow_id=workflow.pk).first()
        if run is None:
            raise ApplicationError("not_found", "No such run.", status=404)
        return render_run_snapshot(run)

    @staticmethod
    def _admission(admission: services.Admission) -> dict[str, Any]:
        return {
            "message_id": admission.message.uid,
            "run_id": admission.run.run_id,
            "created": admission.created,
            "revision": admission.revision,
        }
