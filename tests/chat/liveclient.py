"""A websocket chat client for tests against live servers, following docs/chat-protocol.md's client
rules: apply run events in `seq` order, resume after a reconnect from a snapshot, never double text."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect


@dataclass
class RunView:
    """What a client shows of one run: the answer text and the last applied seq."""

    text: str = ""
    seq: int = 0
    state: str = "queued"
    events: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, frame: dict[str, Any]) -> None:
        kind, seq = frame["type"], int(frame.get("seq") or 0)
        if kind == "run.snapshot":
            if seq > self.seq:
                self.text, self.seq = frame["text"], seq
            self.state = frame["state"]
            return
        if seq <= self.seq:
            return  # already applied
        self.events.append(frame)
        if kind in ("run.finished", "run.stopped", "run.error"):
            self.text, self.seq, self.state = frame.get("text", self.text), seq, kind.split(".")[1]
            return
        if seq != self.seq + 1:
            raise AssertionError(f"gap: have seq {self.seq}, got {seq}")
        self.seq = seq
        if kind == "run.delta":
            self.text += frame["delta"]
        elif kind == "run.started":
            self.state = "running"

    @property
    def ended(self) -> bool:
        return self.state in ("finished", "stopped", "error")


class ChatClient:
    def __init__(self, base_url: str, workflow_id: str, cookie: str) -> None:
        self.base_url, self.workflow_id, self.cookie = base_url, workflow_id, cookie
        self.ws: ClientConnection | None = None
        self.runs: dict[str, RunView] = {}
        self.frames: list[dict[str, Any]] = []
        self._held: dict[str, list[dict[str, Any]]] = {}
        self._n = 0

    async def open(self) -> dict[str, Any]:
        url = self.base_url.replace("http://", "ws://") + f"/ws/chat/{self.workflow_id}/"
        self.ws = await connect(url, origin=self.base_url, additional_headers={"Cookie": self.cookie})  # type: ignore[arg-type]
        return await self.recv()

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
            self.ws = None

    async def recv(self, timeout: float = 20) -> dict[str, Any]:
        assert self.ws is not None
        frame = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.frames.append(frame)
        run_id = frame.get("run_id")
        if frame["type"].startswith("run.") and isinstance(run_id, str):
            if run_id in self._held and frame["type"] != "run.snapshot":
                self._held[run_id].append(frame)
            else:
                self.runs.setdefault(run_id, RunView()).apply(frame)
                if frame["type"] == "run.snapshot":
                    for held in sorted(self._held.pop(run_id, []), key=lambda f: f["seq"]):
                        self.runs[run_id].apply(held)
        return frame

    async def request(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Send a frame and read until its ack/error (other frames are applied on the way)."""
        assert self.ws is not None
        self._n += 1
        rid = f"q{self._n}"
        await self.ws.send(json.dumps({**frame, "request_id": rid}))
        while True:
            reply = await self.recv()
            if reply.get("request_id") == rid and reply["type"] in ("ack", "error", "run.snapshot", "thread"):
                return reply

    async def resume(self, run_id: str) -> dict[str, Any]:
        self._held.setdefault(run_id, [])
        view = self.runs.setdefault(run_id, RunView())
        return await self.request({"type": "resume", "run_id": run_id, "after_seq": view.seq})

    async def until_ended(self, run_id: str, timeout: float = 60) -> RunView:
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.runs.get(run_id, RunView()).ended:
            await self.recv(max(0.1, deadline - asyncio.get_running_loop().time()))
        return self.runs[run_id]
