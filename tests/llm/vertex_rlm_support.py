"""Loopback wire for the Vertex and RLM runtimes: a Google token endpoint and Vertex's recorded stream
(js-genai), and an OpenAI-compatible script for the recursive runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .conformance import recorded_gemini
from .loopback import Received, Reply, openai_sse

ACCESS_TOKEN = "ya29.loopback-access-token"
VERTEX_RECORDING = "Chats_Tests_chats_function_calling_Vertex_AI_with_function_calling_stream.json"
VERTEX_PATH = (
    "/v1beta1/projects/oc-project/locations/us-central1/publishers/google/models/gemini-2.0-flash"
    ":streamGenerateContent?alt=sse"
)


def credentials_file(directory: Path, base_url: str) -> Path:
    """A service-account credentials file (a key made here) whose token endpoint is the loopback
    server: google-auth signs its assertion and fetches the access token there, as at Google's."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    path = directory / "vertex-credentials.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "oc-project",
                "private_key_id": "loopback-key",
                "private_key": pem,
                "client_email": "agent@oc-project.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": base_url + "/token",
            }
        )
    )
    return path


def token_reply(received: Received) -> Reply:
    assert received.path == "/token"
    assert b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" in received.raw
    return Reply(body={"access_token": ACCESS_TOKEN, "expires_in": 3600, "token_type": "Bearer"})


def vertex_call_reply(received: Received) -> Reply:
    """Vertex's recorded answer to `what is the result of 100/2`: a customDivide call."""
    assert received.path == VERTEX_PATH
    assert received.headers["authorization"] == f"Bearer {ACCESS_TOKEN}"
    return Reply(raw=recorded_gemini(VERTEX_RECORDING)[0])


def vertex_text(text: str, response_id: str = "vx-answer") -> bytes:
    chunk = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
        "modelVersion": "gemini-2.0-flash",
        "responseId": response_id,
        "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 6, "totalTokenCount": 46},
    }
    return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


def chat_chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, usage: Any = None
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "rlm",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "rlm-model",
    }
    chunk["choices"] = (
        [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if delta or finish else []
    )
    if usage:
        chunk["usage"] = usage
    return chunk


def chat_call(call_id: str, name: str, arguments: str) -> Reply:
    call = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    usage = {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59}
    return Reply(
        sse=openai_sse(
            chat_chunk({"tool_calls": [call]}), chat_chunk(finish="tool_calls"), chat_chunk(usage=usage)
        )
    )


def chat_text(text: str) -> Reply:
    usage = {"prompt_tokens": 60, "completion_tokens": 4, "total_tokens": 64}
    return Reply(
        sse=openai_sse(chat_chunk({"content": text}), chat_chunk(finish="stop"), chat_chunk(usage=usage))
    )
