"""MessageWire: the one message format the runtime, the providers and the conversation store share.

A message is a plain dict ``{"role": ..., "content": [block, ...], "metadata": {...}}``. Blocks are dicts
with a ``type``; the known kinds are checked, any other kind is kept exactly as it came (so data a newer
provider adds survives a save and a load). Tool results live in messages with role ``tool``, one
``tool_result`` block per message.

Everything here is pure: no I/O, no Django.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from opencompany.core import gate
from opencompany.core.errors import ApplicationError
from opencompany.core.json import canonical_json

ROLES = frozenset({"system", "user", "assistant", "tool"})
TOOL_STATUSES = frozenset({"ok", "error", "not_run", "interrupted"})

Message = dict[str, Any]
Block = dict[str, Any]


class WireError(ValueError):
    """A message that is not valid MessageWire. The text says which message/block/field is wrong."""


def _require_str(block: Mapping[str, Any], key: str, where: str, *, non_empty: bool = False) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise WireError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    if non_empty and not value:
        raise WireError(f"{where}: field {key!r} must not be empty")
    return value


def _optional_str(block: Mapping[str, Any], key: str, where: str) -> None:
    if key in block and block[key] is not None and not isinstance(block[key], str):
        raise WireError(f"{where}: field {key!r} must be a string when present")


def _refuse_inline_bytes(block: Mapping[str, Any], where: str) -> None:
    """Hydrated image bytes never enter durable state: only references (file ids, urls) are allowed."""
    source = block.get("source")
    if isinstance(source, Mapping) and (
        "data" in source or source.get("type") == "base64" or source.get("kind") == "bytes"
    ):
        raise WireError(
            f"{where}: inline binary data (source.data / base64) is not allowed in the wire format"
        )
    if block.get("type") == "image" and any(k in block for k in ("data", "bytes", "base64")):
        raise WireError(f"{where}: image bytes are not allowed in the wire format; store a file reference")
    url = block.get("image_url") if block.get("type") == "image" else None
    if isinstance(url, str) and url.startswith("data:"):
        raise WireError(f"{where}: data: URLs are not allowed for images; store a file reference")


def _check_json(value: Any, where: str) -> None:
    try:
        canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise WireError(f"{where}: not JSON-serializable ({exc})") from exc


def _check_block(block: Any, role: str, where: str) -> None:
    """The structural checks of one block (JSON-serializability is checked by the caller)."""
    if not isinstance(block, Mapping):
        raise WireError(f"{where}: a block must be an object, got {type(block).__name__}")
    kind = block.get("type")
    if not isinstance(kind, str) or not kind:
        raise WireError(f"{where}: a block needs a non-empty string 'type'")
    _refuse_inline_bytes(block, where)
    if kind == "text":
        _require_str(block, "text", where)
    elif kind == "thinking":
        _require_str(block, "thinking", where)
        _optional_str(block, "signature", where)
    elif kind == "redacted_thinking":
        _require_str(block, "data", where)
    elif kind == "reasoning":
        _optional_str(block, "id", where)
        _optional_str(block, "encrypted_content", where)
    elif kind == "tool_call":
        if role != "assistant":
            raise WireError(f"{where}: tool_call blocks belong to assistant messages, not {role!r}")
        _require_str(block, "id", where, non_empty=True)
        _require_str(block, "name", where, non_empty=True)
        if "arguments" in block:
            if not isinstance(block["arguments"], Mapping):
                raise WireError(f"{where}: 'arguments' must be an object")
        elif "raw_arguments" in block:
            _require_str(block, "raw_arguments", where)
            _require_str(block, "parse_error", where)
        else:
            raise WireError(f"{where}: a tool_call needs 'arguments' or 'raw_arguments' + 'parse_error'")
    elif kind == "tool_result":
        if role != "tool":
            raise WireError(f"{where}: tool_result blocks belong to tool messages, not {role!r}")
        _require_str(block, "tool_call_id", where, non_empty=True)
        _require_str(block, "name", where)
        _require_str(block, "content", where)
        if block.get("status") not in TOOL_STATUSES:
            raise WireError(
                f"{where}: 'status' must be one of {sorted(TOOL_STATUSES)}, got {block.get('status')!r}"
            )
    # Any other kind is kept exactly as it came.


def _normalized(m: Any, where: str) -> Message:
    """The structurally checked message with shallow copies of its parts (nested values are shared)."""
    if not isinstance(m, Mapping):
        raise WireError(f"{where}: must be an object, got {type(m).__name__}")
    role = m.get("role")
    if role not in ROLES:
        raise WireError(f"{where}: 'role' must be one of {sorted(ROLES)}, got {role!r}")
    content = m.get("content", [])
    if isinstance(content, str):
        content = [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise WireError(f"{where}: 'content' must be a list of blocks")
    metadata = m.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise WireError(f"{where}: 'metadata' must be an object")
    results = 0
    for i, block in enumerate(content):
        _check_block(block, role, f"{where}.content[{i}]")
        results += block["type"] == "tool_result"
    if role == "tool" and results != 1:
        raise WireError(f"{where}: a tool message holds exactly one tool_result block, got {results}")
    return {"role": role, "content": [dict(b) for b in content], "metadata": dict(metadata)}


def _locate_json_error(message: Message, where: str) -> None:
    """Raise the WireError naming the part of `message` that is not JSON-serializable (the error path)."""
    _check_json(message["metadata"], f"{where}.metadata")
    for i, block in enumerate(message["content"]):
        _check_json(block, f"{where}.content[{i}]")
    _check_json(message, where)


def validate_message(m: Any, *, index: int | None = None) -> Message:
    """Check one message and return a normalized copy (the input is never modified).

    Normalization: a string ``content`` becomes one text block, a missing ``metadata`` becomes ``{}``,
    top-level keys other than role/content/metadata (``ts``, ``version``, ...) are dropped.
    """
    return copy.deepcopy(encode_message(m, index=index)[0])


def encode_message(m: Any, *, index: int | None = None) -> tuple[Message, str]:
    """Validate one message and give it with its canonical text, serializing once: the write path.

    The same checks and normalization as :func:`validate_message`, but the returned message shares
    nested values with the input (no deep copy): serialize or store it before the input can change.
    """
    where = "message" if index is None else f"message[{index}]"
    message = _normalized(m, where)
    try:
        return message, canonical_json(message)
    except (TypeError, ValueError):
        _locate_json_error(message, where)
        raise  # pragma: no cover - _locate_json_error raises for anything canonical_json refused


def validate_messages(messages: Any) -> list[Message]:
    """Validate a whole transcript; the error names the first bad message by index."""
    if not isinstance(messages, list):
        raise WireError("messages must be a list")
    return [validate_message(m, index=i) for i, m in enumerate(messages)]


def encode(m: Mapping[str, Any]) -> str:
    """Validate and serialize one message (canonical JSON, so equal messages give equal text)."""
    return canonical_json(validate_message(m))


def decode(s: str | bytes) -> Message:
    """Parse and validate one message serialized by :func:`encode` (or any JSON of the same shape)."""
    try:
        raw = json.loads(s)
    except (TypeError, ValueError) as exc:
        raise WireError(f"message: not valid JSON ({exc})") from exc
    return validate_message(raw)


def canonical(m: Mapping[str, Any]) -> str:
    """Sorted keys, no whitespace: the text digests are computed over."""
    return canonical_json(m)


def digest_chain(prev_hex: str, m: Mapping[str, Any]) -> str:
    """``sha256(prev + canonical(m))``; ``prev`` is ``""`` for the first message of a conversation."""
    return hashlib.sha256((prev_hex + canonical(m)).encode("utf-8")).hexdigest()


def digests_of(messages: Iterable[Mapping[str, Any]], prev_hex: str = "") -> list[str]:
    """The digest of every prefix, in order."""
    out: list[str] = []
    for m in messages:
        prev_hex = digest_chain(prev_hex, m)
        out.append(prev_hex)
    return out


# --- helpers -----------------------------------------------------------------------------------------


def text_of(m: Mapping[str, Any]) -> str:
    """The message's visible text: its text blocks joined (a tool message gives its result content)."""
    parts: list[str] = []
    for b in m.get("content") or ():
        kind = b.get("type")
        if kind == "text":
            parts.append(b.get("text", ""))
        elif kind == "tool_result":
            parts.append(b.get("content", ""))
    return "".join(parts)


def tool_calls_of(m: Mapping[str, Any]) -> list[Block]:
    """The tool_call blocks of an assistant message, in order."""
    return [b for b in m.get("content") or () if b.get("type") == "tool_call"]


def tool_result_of(m: Mapping[str, Any]) -> Block | None:
    """The tool_result block of a tool message (None for other messages)."""
    for b in m.get("content") or ():
        if b.get("type") == "tool_result":
            return b
    return None


def make_text(text: str) -> Block:
    return {"type": "text", "text": text}


def make_user(text: str, metadata: Mapping[str, Any] | None = None) -> Message:
    return {"role": "user", "content": [make_text(text)], "metadata": dict(metadata or {})}


def make_assistant(blocks: Iterable[Block], metadata: Mapping[str, Any] | None = None) -> Message:
    return {"role": "assistant", "content": list(blocks), "metadata": dict(metadata or {})}


def make_tool_call(call_id: str, name: str, arguments: Mapping[str, Any]) -> Block:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": dict(arguments)}


def make_tool_result(
    call_id: str, name: str, content: str, status: str = "ok", metadata: Mapping[str, Any] | None = None
) -> Message:
    if status not in TOOL_STATUSES:
        raise WireError(f"tool result status must be one of {sorted(TOOL_STATUSES)}, got {status!r}")
    block = {
        "type": "tool_result",
        "tool_call_id": call_id,
        "name": name,
        "content": content,
        "status": status,
    }
    return {"role": "tool", "content": [block], "metadata": dict(metadata or {})}


def parse_tool_arguments(call_id: str, name: str, raw: str | None) -> Block:
    """Build a tool_call block from the model's argument text; malformed JSON is kept raw, never raised."""
    text = raw or ""
    if not text.strip():
        return make_tool_call(call_id, name, {})
    try:
        # Through the input gate: nesting bounded before parsing, no NUL or lone surrogate in a string.
        gate.check_raw_depth(text, field="arguments")
        parsed = gate.parse(text)
        gate.check_strings(parsed, field="arguments")
    except (ApplicationError, ValueError) as exc:
        return {
            "type": "tool_call",
            "id": call_id,
            "name": name,
            "raw_arguments": text,
            "parse_error": gate.describe(exc)
            if isinstance(exc, ApplicationError)
            else f"invalid JSON: {exc}",
        }
    reason = None
    if not isinstance(parsed, dict):
        reason = f"arguments must be a JSON object, got {type(parsed).__name__}"
    else:
        try:
            canonical_json(parsed)
        except ValueError:
            reason = "arguments contain non-finite numbers (NaN or Infinity)"
    if reason is not None:
        return {
            "type": "tool_call",
            "id": call_id,
            "name": name,
            "raw_arguments": text,
            "parse_error": reason,
        }
    return make_tool_call(call_id, name, parsed)
