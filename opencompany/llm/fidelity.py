"""Fidelity: which runtime wrote each assistant turn, what of its continuation state is kept, and the
portable hand-off when an agent moves to another runtime.

Every assistant turn a provider completes carries ``metadata.runtime`` (the provider that wrote it) and
``metadata.fidelity``: ``provider_replayable`` when the stored turn rebuilds that provider's next request
without losing continuation data the provider exposed (signed thinking, encrypted reasoning, thought
signatures), ``portable`` when only the visible conversation (text, tool calls, tool results) is kept,
``observable`` when the turn is what an agent program reported of its own run (its text, the tool calls
and results it showed) while the program keeps its state itself. The executor adds ``metadata.epoch``:
a provider switch starts a new epoch.

Opaque state is only ever sent back to the runtime that produced it: providers replay it through
:func:`replays_opaque_state`, and a switch rewrites the stored conversation into its portable form
(:func:`plan_handoff`) after the caller archived the original.

Pure: no I/O, no Django.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .wire import Block, Message

Fidelity = Literal["provider_replayable", "portable", "observable"]
PROVIDER_REPLAYABLE: Fidelity = "provider_replayable"
PORTABLE: Fidelity = "portable"
OBSERVABLE: Fidelity = "observable"
FIDELITIES: tuple[Fidelity, ...] = (PROVIDER_REPLAYABLE, PORTABLE, OBSERVABLE)
# Lowest first: how much of a provider's continuation state a label promises is kept.
_RANK = {OBSERVABLE: 0, PORTABLE: 1, PROVIDER_REPLAYABLE: 2}

# Block kinds that carry one provider's continuation state and mean nothing to another.
OPAQUE_KINDS = frozenset({"thinking", "redacted_thinking", "reasoning", "provider_block"})
# Fields a provider adds to portable blocks (item ids, thought signatures); dropped in a hand-off.
_PORTABLE_FIELDS = {
    "text": ("type", "text"),
    "tool_call": ("type", "id", "name", "arguments", "raw_arguments", "parse_error"),
}


def stamp(message: Message, *, runtime: str, fidelity: Fidelity) -> Message:
    """``message`` with its runtime and fidelity recorded in its metadata (a new dict; the input is kept)."""
    return {
        **message,
        "metadata": {**(message.get("metadata") or {}), "runtime": runtime, "fidelity": fidelity},
    }


def runtime_of(message: Mapping[str, Any]) -> str | None:
    """The runtime that wrote an assistant turn. A turn stored before runtimes were recorded that holds
    signed thinking came from Anthropic (the only runtime that produced such blocks); otherwise None."""
    if message.get("role") != "assistant":
        return None
    runtime = (message.get("metadata") or {}).get("runtime")
    if isinstance(runtime, str) and runtime:
        return runtime
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind in {"thinking", "redacted_thinking"} or (
            kind == "provider_block" and block.get("provider") == "anthropic"
        ):
            return "anthropic"
    return None


def replays_opaque_state(message: Mapping[str, Any], runtime: str) -> bool:
    """Whether ``runtime`` may receive the opaque blocks and provider fields of this assistant turn."""
    return runtime_of(message) == runtime


def lowest(fidelities: Iterable[str | None]) -> Fidelity | None:
    """The lowest of the known fidelities given (None when none is known)."""
    seen = set(fidelities)
    for fidelity in sorted(FIDELITIES, key=_RANK.__getitem__):
        if fidelity in seen:
            return fidelity
    return None


def carried_fidelity(
    messages: Sequence[Mapping[str, Any]],
    runtime: str,
    declared: Fidelity,
    *,
    sent: Callable[[Mapping[str, Any]], bool] | None = None,
) -> Fidelity:
    """The fidelity of what a request to ``runtime`` carries: the lowest of the runtime's declared
    fidelity and of every assistant turn it sends. A turn of ``runtime`` carries its stored fidelity; a
    turn of another runtime goes in its portable form. ``sent`` leaves out turns the request omits."""
    found: list[str | None] = [declared]
    for message in messages:
        if message.get("role") != "assistant" or (sent is not None and not sent(message)):
            continue
        if runtime_of(message) == runtime:
            found.append((message.get("metadata") or {}).get("fidelity") or PORTABLE)
        else:
            found.append(PORTABLE)
    return lowest(found) or declared


def epoch_of(message: Mapping[str, Any]) -> int:
    epoch = (message.get("metadata") or {}).get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 1 else 1


def turn_fidelity(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """``{runtime, fidelity, epoch}`` of an assistant turn as stored (None for other roles)."""
    if message.get("role") != "assistant":
        return None
    fidelity = (message.get("metadata") or {}).get("fidelity")
    return {
        "runtime": runtime_of(message),
        "fidelity": fidelity if fidelity in FIDELITIES else None,
        "epoch": epoch_of(message),
    }


def _holds_foreign_state(message: Mapping[str, Any], runtime: str) -> bool:
    theirs = runtime_of(message)
    if theirs is None or theirs == runtime:
        return False
    if (message.get("metadata") or {}).get("fidelity") != PORTABLE:
        return True
    return any(block.get("type") not in _PORTABLE_FIELDS for block in message.get("content") or ())


def epoch_for(messages: Sequence[Mapping[str, Any]], runtime: str) -> int:
    """The epoch the next turn of ``runtime`` belongs to: the latest turn's epoch when that turn is of
    the same runtime (or of none known), else one past the highest epoch stored."""
    highest = 1
    latest: Mapping[str, Any] | None = None
    for message in messages:
        if message.get("role") == "assistant":
            highest = max(highest, epoch_of(message))
            if runtime_of(message) is not None:
                latest = message
    if latest is None or runtime_of(latest) == runtime:
        return epoch_of(latest) if latest is not None else highest
    return highest + 1


def portable_block(block: Block) -> Block | None:
    """A block as any runtime can take it: text and tool calls without provider fields; opaque and
    unknown kinds are dropped (text kept as a provider block keeps its text)."""
    kind = block.get("type")
    if kind in _PORTABLE_FIELDS:
        kept = {k: block[k] for k in _PORTABLE_FIELDS[kind] if k in block}
        if kind == "text" and not kept.get("text"):
            return None
        return kept
    inner = block.get("block")
    if kind == "provider_block" and isinstance(inner, Mapping) and inner.get("type") == "text":
        text = inner.get("text")
        return {"type": "text", "text": text} if isinstance(text, str) and text else None
    return None


def portable_message(message: Message) -> Message | None:
    """An assistant turn in portable form (None when nothing portable is left); other roles unchanged."""
    if message.get("role") != "assistant":
        return message
    blocks = [b for b in (portable_block(block) for block in message.get("content") or ()) if b is not None]
    if not blocks:
        return None
    metadata = {**(message.get("metadata") or {}), "fidelity": PORTABLE}
    return {"role": "assistant", "content": blocks, "metadata": metadata}


@dataclass(frozen=True)
class Handoff:
    """A portable hand-off: the conversation without another runtime's opaque state."""

    messages: list[Message]
    from_runtimes: tuple[str, ...]
    epoch: int


def plan_handoff(messages: Sequence[Message], runtime: str) -> Handoff | None:
    """The hand-off to ``runtime``, or None when no stored turn holds another runtime's state.

    Turns of ``runtime`` itself, and turns already portable, are kept as they are; the other turns lose
    their opaque blocks and provider fields and are marked ``portable``. The caller archives the
    original before storing the result.
    """
    foreign = [m for m in messages if _holds_foreign_state(m, runtime)]
    if not foreign:
        return None
    out: list[Message] = []
    for message in messages:
        if _holds_foreign_state(message, runtime):
            converted = portable_message(message)
            if converted is not None:
                out.append(converted)
        else:
            out.append(message)
    runtimes = tuple(sorted({r for r in (runtime_of(m) for m in foreign) if r is not None}))
    return Handoff(messages=out, from_runtimes=runtimes, epoch=epoch_for(messages, runtime))
