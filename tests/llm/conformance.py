"""Recorded and documented provider streams (tests/llm/fixtures, see PROVENANCE.md) and loopback servers
that enforce each provider's documented continuation rule: a request that leaves out continuation state
the server issued is answered HTTP 400, as the real API does, so a dropped field fails loudly."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .loopback import Received, Reply

FIXTURES = Path(__file__).parent / "fixtures"


def stream(name: str, turn: int | None = None) -> bytes:
    """A fixture's bytes as they are; a multi-turn fixture's ``{turn}`` token is set to ``turn``."""
    data = (FIXTURES / name).read_bytes()
    return data.replace(b"{turn}", str(turn).encode()) if turn is not None else data


def recorded_gemini(name: str) -> list[bytes]:
    """The responses of a js-genai recording. The recording keeps each SSE segment parsed, so each is
    written back as one ``data:`` line of its JSON."""
    recording = json.loads((FIXTURES / "gemini" / name).read_text())
    return [
        b"".join(
            b"data: " + json.dumps(segment).encode() + b"\r\n\r\n"
            for segment in interaction["response"]["bodySegments"]
        )
        for interaction in recording["interactions"]
    ]


def refused(message: str) -> Reply:
    return Reply(status=400, body={"error": {"message": message, "type": "invalid_request_error"}})


class Enforcer:
    """Answers each request with the next fixture once the request carries back everything issued
    so far; ``issued`` maps what the server gave to what it expects to find again."""

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = list(replies)
        self.refusals: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    def missing(self, body: dict[str, Any]) -> str | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def learn(self, reply: bytes) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __call__(self, received: Received) -> Reply:
        self.bodies.append(received.body)
        problem = self.missing(received.body)
        if problem is not None:
            self.refusals.append(problem)
            return refused(problem)
        reply = self.replies.pop(0)
        self.learn(reply)
        return Reply(raw=reply)


def _events(data: bytes) -> list[dict[str, Any]]:
    lines = data.decode().splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"]


class AnthropicThinking(Enforcer):
    """Extended thinking with tools: an assistant turn that used a tool goes back with its thinking
    block and that block's signature unchanged."""

    def __init__(self, replies: list[bytes]) -> None:
        super().__init__(replies)
        self.signatures: dict[str, str] = {}  # tool_use id -> signature of the thinking before it

    def learn(self, reply: bytes) -> None:
        signature = ""
        for event in _events(reply):
            delta = event.get("delta") or {}
            if delta.get("type") == "signature_delta":
                signature = delta["signature"]
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.signatures[block["id"]] = signature

    def missing(self, body: dict[str, Any]) -> str | None:
        sent = {}
        for message in body["messages"]:
            if message["role"] != "assistant":
                continue
            signatures = [b.get("signature") for b in message["content"] if b["type"] == "thinking"]
            for block in message["content"]:
                if block["type"] == "tool_use":
                    sent[block["id"]] = signatures[0] if signatures else None
        for call_id, signature in self.signatures.items():
            if sent.get(call_id) != signature:
                return f"messages: the thinking block (signature) before tool_use {call_id} is missing"
        return None


class ResponsesEncrypted(Enforcer):
    """Stateless Responses with reasoning: each reasoning item goes back, encrypted content unchanged,
    before the function call it led to."""

    def __init__(self, replies: list[bytes]) -> None:
        super().__init__(replies)
        self.reasoning: dict[str, str] = {}  # call_id -> encrypted content of the reasoning before it

    def learn(self, reply: bytes) -> None:
        encrypted = ""
        for event in _events(reply):
            if event["type"] != "response.output_item.done":
                continue
            item = event["item"]
            if item["type"] == "reasoning":
                encrypted = item.get("encrypted_content") or ""
            elif item["type"] == "function_call":
                self.reasoning[item["call_id"]] = encrypted

    def missing(self, body: dict[str, Any]) -> str | None:
        before: dict[str, str | None] = {}
        last = None
        for item in body["input"]:
            if item.get("type") == "reasoning":
                last = item.get("encrypted_content")
            elif item.get("type") == "function_call":
                before[item["call_id"]] = last
        for call_id, encrypted in self.reasoning.items():
            if before.get(call_id) != encrypted:
                return f"input: the reasoning item before function_call {call_id} is missing"
        return None


class GeminiSignatures(Enforcer):
    """Gemini 3 function calling: a functionCall part goes back with its thoughtSignature."""

    def __init__(self, replies: list[bytes]) -> None:
        super().__init__(replies)
        self.signatures: dict[str, str] = {}  # function call content -> signature

    def learn(self, reply: bytes) -> None:
        for chunk in _events(reply):
            for part in chunk["candidates"][0]["content"]["parts"]:
                if "functionCall" in part:
                    self.signatures[json.dumps(part["functionCall"]["args"], sort_keys=True)] = part[
                        "thoughtSignature"
                    ]

    def missing(self, body: dict[str, Any]) -> str | None:
        sent = {}
        for content in body["contents"]:
            for part in content["parts"]:
                if "functionCall" in part:
                    signature = part.get("thoughtSignature") or part.get("thought_signature")
                    key = json.dumps(part["functionCall"]["args"], sort_keys=True)
                    sent[key] = (
                        base64.b64encode(base64.urlsafe_b64decode(signature)).decode() if signature else None
                    )
        for key, signature in self.signatures.items():
            if sent.get(key) != signature:
                return "Function call is missing a thought_signature in functionCall parts."
        return None


class ChatCompletionsField(Enforcer):
    """An OpenAI-compatible server whose continuation rides an extension field: DeepSeek's thinking
    mode wants an assistant message with tool calls back with its ``reasoning_content``; Gemini's
    OpenAI-compatible endpoint wants a tool call back with its ``extra_content`` thought signature."""

    def __init__(self, replies: list[bytes], field: str) -> None:
        super().__init__(replies)
        self.field = field
        self.issued: dict[str, Any] = {}  # tool call id -> the field's value

    def learn(self, reply: bytes) -> None:
        reasoning: list[str] = []
        for chunk in _events(reply):
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("reasoning_content"):
                    reasoning.append(delta["reasoning_content"])
                for call in delta.get("tool_calls") or ():
                    if call.get("id"):
                        value = (
                            "".join(reasoning) if self.field == "reasoning_content" else call.get(self.field)
                        )
                        self.issued[call["id"]] = value

    def missing(self, body: dict[str, Any]) -> str | None:
        for message in body["messages"]:
            for call in message.get("tool_calls") or ():
                if call["id"] not in self.issued:
                    continue
                sent = message.get(self.field) if self.field == "reasoning_content" else call.get(self.field)
                if sent != self.issued[call["id"]]:
                    if self.field == "reasoning_content":
                        return "The reasoning_content in the thinking mode must be passed back to the API."
                    return "Function call is missing a thought_signature in functionCall parts."
        return None


Responder = Callable[[Received], Reply]
