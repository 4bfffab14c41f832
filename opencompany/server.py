"""The production server: daphne, with read deadlines for request heads and bodies, a request body limit
enforced while reading, an access log without query strings, and a graceful shutdown.

Run it as `python -m opencompany.server -b 0.0.0.0 -p 8000 opencompany.asgi:application` (every daphne
option applies). Daphne's HTTP layer reads a whole request body, to memory or a temporary file, before
the application sees the request, so a limit in the application comes too late; here a body larger than
`OPENCOMPANY_MAX_BODY_BYTES`, announced by `Content-Length` or counted while a chunked body arrives, is
answered 413 `too_large` at once and the rest of it is never read. The access log writes each request's
path without its query string (query strings carry search text).

On SIGTERM (or SIGINT) the server stops listening and drains before daphne ends its connections
(`opencompany.core.lifecycle.shut_down`): runs are no longer admitted here, live answers get
`OPENCOMPANY_SHUTDOWN_GRACE_S` to finish, the rest end interrupted with their text kept, and every chat
socket is closed with 4012 ("server restarting"), which the page answers by reconnecting.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
import time
from typing import Any

from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server as DaphneServer
from django.conf import settings
from twisted.internet import defer, reactor
from twisted.protocols import basic
from twisted.web import http

from opencompany.core import lifecycle
from opencompany.core.errors import TOO_LARGE, ApplicationError, render_error

logger = logging.getLogger(__name__)

# After a refusal the connection reads (and drops) what the client still sends for at most this long,
# so the client can read the 413 before the connection closes, then it is cut.
REFUSED_LINGER_S = 2.0


def path_without_query(path: Any) -> Any:
    """The request path of an access-log entry without its query string."""
    return path.split("?", 1)[0] if isinstance(path, str) else path


def too_large_body(limit: int, length: int | None) -> bytes:
    """The 413 error body, the same envelope as every other refusal."""
    extra: dict[str, Any] = {"limit": limit}
    if length is not None:
        extra["length"] = length
    error = ApplicationError(TOO_LARGE, f"The request body is larger than {limit} bytes.", extra, status=413)
    return json.dumps(render_error(error)).encode()


class BodyLimitedRequest(WebRequest):
    """Daphne's request, refusing a body over the limit as soon as its size is known."""

    _refused = False
    _received = 0

    def gotLength(self, length: int | None) -> None:
        limit = int(settings.OPENCOMPANY_MAX_BODY_BYTES)
        if length is not None and length > limit:
            self._refuse(limit, length)
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        limit = int(settings.OPENCOMPANY_MAX_BODY_BYTES)
        if self._received > limit:
            self._refuse(limit, None)
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._refused:
            return
        super().requestReceived(command, path, version)

    def _refuse(self, limit: int, length: int | None) -> None:
        self._refused = True
        self.content = io.BytesIO()  # nothing of the body is kept
        channel = self.channel
        transport = channel.transport
        body = too_large_body(limit, length)
        transport.write(
            b"HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
            + body
        )
        # From here on the connection parses nothing: what the client still sends is dropped unread.
        channel.dataReceived = lambda data: None
        self._log_refusal()
        try:
            transport.loseWriteConnection()
        except (AttributeError, NotImplementedError):
            transport.loseConnection()
        reactor.callLater(REFUSED_LINGER_S, _abort, transport)  # type: ignore[call-arg,arg-type]

    def _log_refusal(self) -> None:
        client = self.getClientAddress()
        host, port = getattr(client, "host", None), getattr(client, "port", None)
        # The request line is parsed into the request only once the body is complete; the channel
        # holds it until then.
        method = getattr(self.channel, "_command", None) or b"-"
        path = getattr(self.channel, "_path", None) or b"-"
        self.server.log_action(
            "http",
            "complete",
            {
                "path": path.decode("ascii", "replace"),
                "status": 413,
                "method": method.decode("ascii", "replace"),
                "client": f"{host}:{port}" if host is not None else None,
                "time_taken": 0.0,
                "size": 0,
            },
        )


def _abort(transport: Any) -> None:
    if getattr(transport, "connected", False):
        transport.abortConnection()


class DeadlineHTTPChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 channel with read deadlines instead of an idle timeout.

    Twisted restarts its timeout on every byte received, so a client sending one byte at a time keeps a
    connection (and its buffers) forever. Here a request's head must be complete within
    `OPENCOMPANY_HTTP_HEAD_TIMEOUT_S` of the connection opening or the previous response (an idle
    keep-alive connection ends then too), and its body within `OPENCOMPANY_HTTP_BODY_TIMEOUT_S` of the
    head; past either, the connection is closed. Once a request is complete no deadline runs (a
    response may take long; an upgraded websocket leaves the channel)."""

    def connectionMade(self) -> None:
        self.timeOut = int(settings.OPENCOMPANY_HTTP_HEAD_TIMEOUT_S)
        super().connectionMade()

    def dataReceived(self, data: bytes) -> None:
        basic.LineReceiver.dataReceived(self, data)  # no reset: the deadline stands

    def allHeadersReceived(self) -> None:
        super().allHeadersReceived()
        if self.length != 0:  # a body follows (None: chunked)
            self.setTimeout(int(settings.OPENCOMPANY_HTTP_BODY_TIMEOUT_S))

    def allContentReceived(self) -> None:
        # Twisted saves the period in force here and restores it for the next request's head.
        self.setTimeout(int(settings.OPENCOMPANY_HTTP_HEAD_TIMEOUT_S))
        super().allContentReceived()


class BodyLimitedHTTPFactory(HTTPFactory):
    def protocol(self) -> http.HTTPChannel:  # type: ignore[override]
        """HTTP/1.1 channels with read deadlines (what `HTTPFactory.buildProtocol` builds on)."""
        return DeadlineHTTPChannel()

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BodyLimitedRequest
        protocol.timeOut = int(settings.OPENCOMPANY_HTTP_HEAD_TIMEOUT_S)
        return protocol


class Server(DaphneServer):
    """Daphne's server with `BodyLimitedRequest`, an access log without query strings and a graceful
    shutdown."""

    def listen_success(self, port: Any) -> None:
        self._ports = [*getattr(self, "_ports", []), port]
        super().listen_success(port)

    def kill_all_applications(self) -> Any:
        """Twisted's "before shutdown" step, in place of daphne's (which ends every connection at once and
        stops at the first connection that has no application yet): stop listening, drain
        (`lifecycle.shut_down`), let requests already being answered finish within what is left of the
        grace period, then cancel what remains."""
        for port in getattr(self, "_ports", []):
            port.stopListening()
        return defer.Deferred.fromFuture(asyncio.ensure_future(self._drain_and_end()))

    async def _drain_and_end(self) -> None:
        deadline = time.monotonic() + float(settings.OPENCOMPANY_SHUTDOWN_GRACE_S)
        try:
            await lifecycle.shut_down()
        except Exception:
            logger.exception("shutdown drain failed")
        await lifecycle.wait_until(lambda: not self._pending_requests(), deadline)
        pending = self._pending_instances()
        for instance in pending:
            instance.cancel()
        logger.info("shutdown: cancelled %d pending application instance(s)", len(pending))
        await asyncio.gather(*pending, return_exceptions=True)

    def _pending_instances(self) -> list[asyncio.Future[Any]]:
        # A connection whose request is still being read has no application instance yet.
        instances = (details.get("application_instance") for details in list(self.connections.values()))
        return [instance for instance in instances if instance is not None and not instance.done()]

    def _pending_requests(self) -> list[Any]:
        """HTTP requests being answered (websockets were closed by the drain and are not waited for)."""
        return [
            protocol
            for protocol, details in list(self.connections.items())
            if isinstance(protocol, WebRequest)
            and details.get("application_instance") is not None
            and not details["application_instance"].done()
        ]

    @property
    def http_factory(self) -> HTTPFactory:
        return self._http_factory

    @http_factory.setter
    def http_factory(self, factory: HTTPFactory) -> None:
        # `run()` builds daphne's factory and assigns it here; ours takes its place.
        self._http_factory = BodyLimitedHTTPFactory(self)

    def log_action(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if "path" in details:
            details = {**details, "path": path_without_query(details["path"])}
        super().log_action(protocol, action, details)


class CommandLine(CommandLineInterface):
    server_class = Server


def main() -> None:
    CommandLine.entrypoint()
    # The reactor has stopped: a request thread still waiting on the stopped event loop could never end,
    # and the interpreter's exit would wait for it forever. Everything that could finish has finished.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
