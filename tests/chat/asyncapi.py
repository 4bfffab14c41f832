"""docs/asyncapi.yaml as a validator: which frames each side may send, and whether a frame matches its
message's payload schema (JSON Schema draft 7, the AsyncAPI schema format)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "asyncapi.yaml"
URI = "urn:opencompany:asyncapi"


class FrameNotDescribed(AssertionError):
    """A frame the document does not describe (unknown type, or a payload its schema refuses)."""


@cache
def document() -> dict[str, Any]:
    return yaml.safe_load(DOCUMENT.read_text())


@cache
def _registry() -> Registry:
    return Registry().with_resource(URI, Resource.from_contents(document(), default_specification=DRAFT7))


def _message_names(operation: str) -> dict[str, str]:
    """Frame type → the message's key under `components/messages`, for one operation's messages."""
    doc = document()
    names: dict[str, str] = {}
    for ref in doc["operations"][operation]["messages"]:
        channel_message = ref["$ref"].rsplit("/", 1)[1]
        component = doc["channels"]["chat"]["messages"][channel_message]["$ref"].rsplit("/", 1)[1]
        names[doc["components"]["messages"][component]["name"]] = component
    return names


def server_frame_types() -> set[str]:
    return set(_message_names("sendServerFrames"))


def client_frame_types() -> set[str]:
    return set(_message_names("receiveClientFrames"))


def validate(frame: Any, *, sent_by: str = "server") -> None:
    """Raise `FrameNotDescribed` unless `frame` is a message the document lets `sent_by` send."""
    operation = "sendServerFrames" if sent_by == "server" else "receiveClientFrames"
    names = _message_names(operation)
    kind = frame.get("type") if isinstance(frame, dict) else None
    if kind not in names:
        raise FrameNotDescribed(f"no {sent_by} frame of type {kind!r} is described")
    schema = {"$ref": f"{URI}#/components/messages/{names[kind]}/payload"}
    validator = jsonschema.Draft7Validator(
        schema, registry=_registry(), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER
    )
    problems = sorted(validator.iter_errors(frame), key=lambda e: list(e.absolute_path))
    if problems:
        detail = "; ".join(f"{list(p.absolute_path)}: {p.message}" for p in problems[:5])
        raise FrameNotDescribed(f"{kind} frame does not match its schema: {detail}")
