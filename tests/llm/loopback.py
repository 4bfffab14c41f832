"""A loopback HTTP server that answers like a provider's streaming API, recording what it received.

A queued reply is a :class:`Reply` or a function of the :class:`Received` request returning one; such a
function may assert on what it received: a failed assertion is recorded in ``failures`` and answered
with HTTP 500, so the test sees both.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    sse: list[str] = field(default_factory=list)  # raw SSE frames, each written and flushed separately
    raw: bytes | None = None  # a recorded stream, written exactly as it is (never re-serialized)
    body: Any = None  # JSON body for non-streaming replies (errors)
    headers: dict[str, str] = field(default_factory=dict)
    # Mid-stream pause: after `hold_after` frames the server waits for `release` (or the client leaving).
    hold_after: int | None = None
    release: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes


def openai_sse(*chunks: dict[str, Any]) -> list[str]:
    return [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]


def anthropic_sse(*events: dict[str, Any]) -> list[str]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def responses_sse(*events: dict[str, Any]) -> list[str]:
    """OpenAI Responses API streaming: named events, each numbered, no terminator."""
    return [
        f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': i})}\n\n"
        for i, e in enumerate(events)
    ]


def gemini_sse(*chunks: dict[str, Any]) -> list[str]:
    """Gemini ``streamGenerateContent?alt=sse``: one GenerateContentResponse per data line."""
    return [f"data: {json.dumps(c)}\r\n\r\n" for c in chunks]


Responder = Reply | Callable[["Received"], Reply]


class LoopbackServer:
    def __init__(self) -> None:
        self.replies: list[Responder] = []
        self.received: list[Received] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                received = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw)
                with server._lock:
                    server.received.append(received)
                    responder = (
                        server.replies.pop(0)
                        if server.replies
                        else Reply(status=500, body={"error": "no reply"})
                    )
                try:
                    reply = responder(received) if callable(responder) else responder
                except AssertionError as exc:
                    server.failures.append(str(exc) or repr(exc))
                    reply = Reply(status=500, body={"error": {"message": "loopback assertion failed"}})
                if reply.raw is not None:
                    self.send_response(reply.status)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    try:
                        self.wfile.write(reply.raw)
                        self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return
                if reply.sse:
                    self.send_response(reply.status)
                    self.send_header("content-type", "text/event-stream")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    try:
                        for i, frame in enumerate(reply.sse):
                            if reply.hold_after is not None and i == reply.hold_after:
                                reply.held.set()
                                reply.release.wait(timeout=10)
                            self.wfile.write(frame.encode())
                            self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the client went away mid-stream (Stop)
                    return
                payload = json.dumps(reply.body if reply.body is not None else {}).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"

    def start(self) -> LoopbackServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
