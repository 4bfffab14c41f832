"""Gemini on Vertex AI: ``generate_content`` streamed through ``google-genai`` with ``vertexai=True``.

The endpoint is Vertex's: ``{base}/v1beta1/projects/{project}/locations/{location}/publishers/google/
models/{model}:streamGenerateContent?alt=sse``, authenticated with Google credentials (a credentials
file, or the application default credentials) rather than an API key.

Fidelity is ``observable``, as declared for Vertex: each stored turn is exactly what Vertex streamed
(thought summaries, text, function calls, each with its thought signature, other parts whole), plus its
binding in ``metadata.vertex``: the ``environment`` it was made in (``projects/{project}/locations/
{location}``) and the ``interaction`` (Vertex's response id). The binding is kept with the conversation:
signatures and provider parts go back only to the environment that issued them; a turn of another
environment (the operator moved the project or region) or another runtime goes in its portable form.
"""

from __future__ import annotations

import json
from typing import Any

from google import genai
from google.genai import types

from ..fidelity import OBSERVABLE, carried_fidelity, replays_opaque_state, stamp
from ..wire import Message
from .base import Fidelity, Request
from .gemini_provider import GeminiProvider, to_gemini_contents

RUNTIME = "vertex"
API_VERSION = "v1beta1"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def binding_of(message: Message) -> dict[str, Any]:
    value = (message.get("metadata") or {}).get(RUNTIME)
    return value if isinstance(value, dict) else {}


def load_credentials(path: str) -> Any:
    """Credentials from a service-account or authorized-user file (read locally; the access token is
    fetched with the first request)."""
    from google.oauth2 import credentials as user_credentials
    from google.oauth2 import service_account

    with open(path, encoding="utf-8") as handle:
        kind = json.load(handle).get("type")
    if kind == "service_account":
        return service_account.Credentials.from_service_account_file(path, scopes=SCOPES)  # type: ignore[no-untyped-call]
    if kind == "authorized_user":
        return user_credentials.Credentials.from_authorized_user_file(path, scopes=SCOPES)  # type: ignore[no-untyped-call]
    raise ValueError(f"unsupported credentials type {kind!r}")


class VertexProvider(GeminiProvider):
    name = RUNTIME
    fidelity: Fidelity = OBSERVABLE

    def __init__(
        self,
        *,
        project: str,
        location: str,
        credentials: Any,
        base_url: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        super().__init__(api_key="", base_url=base_url, timeout_s=timeout_s)
        self._vertex_base_url = base_url
        self.project = project
        self.location = location
        self.credentials = credentials
        self.environment = f"projects/{project}/locations/{location}"

    def _client(self) -> genai.Client:
        options = types.HttpOptions(
            base_url=self._vertex_base_url,
            api_version=API_VERSION,
            timeout=int(self._timeout_s * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return genai.Client(
            vertexai=True,
            project=self.project,
            location=self.location,
            credentials=self.credentials,
            http_options=options,
        )

    def _own(self, message: Message) -> bool:
        """Vertex's own turn, made in the environment this provider talks to."""
        return (
            replays_opaque_state(message, RUNTIME)
            and binding_of(message).get("environment") == self.environment
        )

    def _contents(self, messages: list[Message]) -> list[types.Content]:
        return to_gemini_contents(messages, own=self._own)

    def _finished(self, message: Message, response_id: str | None) -> Message:
        bound = {
            **message,
            "metadata": {RUNTIME: {"environment": self.environment, "interaction": response_id}},
        }
        return stamp(bound, runtime=RUNTIME, fidelity=OBSERVABLE)

    def request_fidelity(self, request: Request) -> Fidelity:
        return carried_fidelity(request.messages, RUNTIME, self.fidelity)
