"""The prompt of a firing that does not continue a session of the program's own: the stored
conversation before the owner's new message as a portable transcript (text, tool calls, tool results
of every runtime), then the message. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from ..policies import render_for_summary
from ..wire import Message, text_of

TRANSCRIPT_INTRO = (
    "This conversation continues from earlier turns, which you do not have in your own history. "
    "Here they are as a transcript, oldest first:"
)
NEW_MESSAGE_INTRO = "The owner's new message, which you answer now:"


def firing_prompt(messages: Sequence[Message]) -> str:
    """``messages`` is the conversation with the owner's new message last. Without earlier turns the
    prompt is the message itself."""
    if not messages:
        return ""
    *earlier, latest = messages
    text = text_of(latest)
    transcript = render_for_summary(earlier) if earlier else ""
    if not transcript:
        return text
    return f"{TRANSCRIPT_INTRO}\n\n<transcript>\n{transcript}\n</transcript>\n\n{NEW_MESSAGE_INTRO}\n\n{text}"
