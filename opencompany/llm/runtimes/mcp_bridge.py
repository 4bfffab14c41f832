"""The MCP server a runtime program launches over stdio: a pipe to the run that launched the program.

The tools themselves run in the run's own process (:class:`opencompany.llm.runtimes.mcp.McpToolServer`),
with the run's server-built scope; this program only carries MCP's newline-delimited JSON-RPC between
its stdin/stdout and the run's Unix socket, after presenting the run's one-time token. It holds no
database URL, key or scope, so nothing the model could read from the program's environment reaches
further than the agent's own tools for the length of the run.

Standard library only, run by path (``python -I mcp_bridge.py``): it imports nothing of the project.
Environment: ``OPENCOMPANY_MCP_SOCKET`` (the socket path) and ``OPENCOMPANY_MCP_TOKEN``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading


def _pump_stdin(sock: socket.socket) -> None:
    try:
        while chunk := os.read(0, 65536):
            sock.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)


def main() -> int:
    path = os.environ.get("OPENCOMPANY_MCP_SOCKET", "")
    token = os.environ.get("OPENCOMPANY_MCP_TOKEN", "")
    if not path or not token:
        sys.stderr.write("mcp_bridge: OPENCOMPANY_MCP_SOCKET and OPENCOMPANY_MCP_TOKEN are required\n")
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall(token.encode("ascii") + b"\n")
    except OSError as exc:
        sys.stderr.write(f"mcp_bridge: the run's tool server is gone ({type(exc).__name__})\n")
        return 1
    threading.Thread(target=_pump_stdin, args=(sock,), daemon=True).start()
    out = sys.stdout.buffer
    try:
        while chunk := sock.recv(65536):
            out.write(chunk)
            out.flush()
    except OSError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
