from __future__ import annotations

import asyncio
import time

from opencompany.llm.loop import run_agent_loop
from opencompany.llm.policies import SUMMARIZE_INSTRUCTION
from opencompany.llm.providers import ModelSettings, OfflineProvider, ProviderConfig, Request
from opencompany.llm.providers.base import Completed, TextDelta
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext
from opencompany.llm.wire import make_user, text_of, tool_calls_of

from .helpers import FakeMemory, FakeNotes, FakeSink

SETTINGS = ModelSettings()
CONTEXT = ToolContext(
    run_id="run_1", workflow_id="wf_1", generation=1, agent_node_id="wf_1:aiAgent:1", owner_id=1
)


class Chat:
    """Drives the offline model like the chat does: one conversation, one firing per owner message."""

    def __init__(self, *, with_tools=True):
        self.memory, self.notes = FakeMemory(), FakeNotes()
        self.tools = [self.memory.spec(), self.notes.spec()] if with_tools else []
        self.transcript = []
        self.provider = get_provider(SETTINGS, config=ProviderConfig())

    async def say(self, text):
        self.transcript.append(make_user(text))
        sink = FakeSink()
        request = Request(
            system_blocks=["You are Ada."], messages=list(self.transcript), tools=[], settings=SETTINGS
        )
        result = await run_agent_loop(
            request, self.provider, self.tools, sink, asyncio.Event(), tool_context=CONTEXT
        )
        assert result.status == "finished"
        self.transcript.extend(p for _, p in sink.calls)
        self.last_calls = [c for k, p in sink.calls if k == "assistant" for c in tool_calls_of(p)]
        return text_of(result.final_message)


def test_offline_is_the_keyless_default():
    provider = get_provider(ModelSettings(), config=ProviderConfig())

    assert isinstance(provider, OfflineProvider)
    assert provider.fidelity == "portable"


async def test_remember_then_recall_then_forget_through_the_memory_tool():
    chat = Chat()

    said = await chat.say("Remember that I like green tea.")
    assert chat.last_calls == [
        {
            "type": "tool_call",
            "id": "call_1",
            "name": "memory",
            "arguments": {"operation": "remember", "content": "I like green tea."},
        }
    ]
    assert said == "Got it. I'll remember that I like green tea."

    said = await chat.say("What do you remember about tea?")
    assert chat.last_calls[0]["arguments"] == {"operation": "recall", "query": "tea"}
    assert said == "Here is what I remember about “tea”:\n- I like green tea."

    said = await chat.say("forget tea")
    assert [c["arguments"] for c in chat.last_calls] == [
        {"operation": "recall", "query": "tea"},
        {"operation": "forget", "memory_id": "mem_1", "expected_version": 1},
    ]
    assert said == "Done. I forgot “I like green tea.”."
    assert chat.memory.items == {}

    said = await chat.say("recall tea")
    assert said == "I don't remember anything about “tea”."


async def test_notes_and_bracketed_note_lines_are_ignored_when_reading_the_command():
    chat = Chat()

    said = await chat.say(
        "[note: the owner switched to version 2 of an answer]\n[note: memory item edited]\n\nnote the deadline is Friday"
    )

    assert chat.last_calls == [
        {
            "type": "tool_call",
            "id": "call_1",
            "name": "notes",
            "arguments": {"operation": "add", "text": "the deadline is Friday"},
        }
    ]
    assert said == "Noted: the deadline is Friday"
    assert chat.notes.entries == ["the deadline is Friday"]


async def test_identity_and_continuity_across_turns():
    chat = Chat()

    first = await chat.say("Hello there")
    second = await chat.say("How are you?")
    who = await chat.say("Who are you?")
    recalled_first = await chat.say("What did I say first?")
    recalled_before = await chat.say("what did I say before?")

    assert first == "(Offline demo model) You said “Hello there”. This is the start of our conversation."
    assert second == (
        "(Offline demo model) You said “How are you?”. This is turn 2 of our conversation; "
        "your first message was “Hello there” and just before this you said “Hello there”."
    )
    assert "offline demo model" in who
    assert recalled_first == "The first thing you said was “Hello there”."
    assert recalled_before == "Just before this you said “What did I say first?”."


async def test_without_the_tools_it_says_so_instead_of_calling_them():
    chat = Chat(with_tools=False)

    said = await chat.say("remember that I like tea")

    assert chat.last_calls == []
    assert "no Memory connected" in said


async def test_streams_a_few_words_per_delta_and_is_deterministic():
    provider = OfflineProvider()
    request = Request(
        system_blocks=["s"],
        messages=[make_user("one two three four five six seven")],
        tools=[],
        settings=SETTINGS,
    )

    first = [e async for e in provider.stream(request)]
    second = [e async for e in provider.stream(request)]

    deltas = [e.text for e in first if isinstance(e, TextDelta)]
    assert first == second
    assert all(1 <= len(d.split()) <= 3 for d in deltas)
    assert "".join(deltas) == text_of(first[-1].message)
    assert isinstance(first[-1], Completed)


async def test_pacing_spaces_the_deltas():
    provider = get_provider(SETTINGS, config=ProviderConfig(offline_delay_ms=20))
    request = Request(
        system_blocks=["s"], messages=[make_user("a b c d e f g h i")], tools=[], settings=SETTINGS
    )

    started = time.perf_counter()
    deltas = [e async for e in provider.stream(request) if isinstance(e, TextDelta)]

    assert time.perf_counter() - started >= 0.02 * len(deltas) * 0.9


async def test_stop_while_the_offline_model_streams_keeps_the_partial_answer():
    provider = get_provider(SETTINGS, config=ProviderConfig(offline_delay_ms=5))
    stop = asyncio.Event()
    sink = FakeSink()
    request = Request(
        system_blocks=["s"], messages=[make_user("tell me a long story " * 5)], tools=[], settings=SETTINGS
    )

    def on_event(event):
        if isinstance(event, TextDelta):
            stop.set()

    result = await run_agent_loop(request, provider, [], sink, stop, tool_context=CONTEXT, on_event=on_event)

    assert result.status == "stopped"
    assert sink.kinds == ["final"]
    assert sink.calls[0][1]["metadata"] == {"status": "stopped", "runtime": "offline", "fidelity": "portable"}
    assert text_of(sink.calls[0][1]) == "(Offline demo model) "


async def test_it_answers_summarize_requests_briefly():
    provider = OfflineProvider()
    long_text = "\n".join(f"Owner: line {i} " + "x" * 200 for i in range(20))
    request = Request(
        system_blocks=[SUMMARIZE_INSTRUCTION], messages=[make_user(long_text)], tools=[], settings=SETTINGS
    )

    events = [e async for e in provider.stream(request)]

    summary = text_of(events[-1].message)
    assert summary.startswith("Earlier the owner and the assistant exchanged 20 lines.")
    assert len(summary) < 500
