"""Agent-loop overhead per iteration, excluding the database and the network.

Each sample is one firing of the agent with the offline model at zero pacing: "remember that …" makes
two iterations (a tool call with its in-memory tool round trip, then the final answer), committed into an
in-memory sink. The history ahead of the firing is generated from a seed (Zipf English-like
text, turns of 2-4 messages, tool results of 2-8 KB in about half the turns).

Rows: the full loop with an async tool, the same with a sync tool (run through ``asyncio.to_thread``, as
the DB-backed tools are), and the offline provider streamed alone (the model's own cost, for reference).

    .venv/bin/python bench/runtime.py [--samples 2000] [--history 0,200,1000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opencompany.core.json import canonical_json
from opencompany.llm.loop import run_agent_loop
from opencompany.llm.policies import clear_old_results
from opencompany.llm.providers import ModelSettings, ProviderConfig, Request
from opencompany.llm.providers.base import Usage
from opencompany.llm.registry import get_provider
from opencompany.llm.tools import ToolContext, ToolSpec
from opencompany.llm.wire import make_assistant, make_text, make_tool_call, make_tool_result, make_user

SCHEMA = {
    "type": "object",
    "properties": {
        "operation": {"enum": ["remember", "recall", "list", "forget"]},
        "content": {"type": "string"},
        "query": {"type": "string"},
    },
    "required": ["operation"],
    "additionalProperties": False,
}


class NullSink:
    def __init__(self) -> None:
        self.count = 0

    async def assistant(self, message: dict[str, Any]) -> None:
        self.count += 1

    async def tool_result(self, message: dict[str, Any]) -> None:
        self.count += 1

    async def final(self, message: dict[str, Any], usage: Usage) -> None:
        self.count += 1

    async def replace_all(self, messages: list[dict[str, Any]]) -> None:
        self.count += 1


def _vocabulary(rng: random.Random, size: int = 30_000) -> tuple[list[str], list[float]]:
    common = [
        "the",
        "of",
        "and",
        "to",
        "a",
        "in",
        "is",
        "it",
        "you",
        "that",
        "he",
        "was",
        "for",
        "on",
        "are",
        "with",
        "as",
        "I",
        "his",
        "they",
        "be",
        "at",
        "one",
        "have",
        "this",
        "from",
        "or",
        "had",
        "by",
        "word",
        "but",
        "what",
        "some",
        "we",
        "can",
        "out",
        "other",
        "were",
        "all",
        "there",
        "when",
        "up",
        "use",
        "your",
        "how",
        "said",
        "an",
        "each",
        "she",
        "which",
        "do",
        "their",
        "time",
        "if",
        "will",
        "way",
        "about",
        "many",
        "then",
        "them",
        "write",
        "would",
        "like",
        "so",
        "these",
        "her",
        "long",
        "make",
        "thing",
        "see",
        "him",
        "two",
        "has",
        "look",
        "more",
        "day",
        "could",
        "go",
        "come",
        "did",
        "number",
        "sound",
        "no",
        "most",
        "people",
        "my",
        "over",
        "know",
    ]
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words = list(common)
    while len(words) < size:
        words.append("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
    weights = [1.0 / (rank**1.05) for rank in range(1, size + 1)]
    return words, weights


def _text(rng: random.Random, vocab: tuple[list[str], list[float]], low: int, high: int) -> str:
    target = rng.randint(low, high)
    words = rng.choices(vocab[0], weights=vocab[1], k=target // 4)
    return " ".join(words)[:target]


def history(n_messages: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    out: list[dict[str, Any]] = []
    call = 0
    while len(out) < n_messages:
        turn = [make_user(_text(rng, vocab, 250, 800))]
        if rng.random() < 0.5:
            call += 1
            turn.append(
                make_assistant([make_tool_call(f"h{call}", "memory", {"operation": "recall", "query": "x"})])
            )
            turn.append(make_tool_result(f"h{call}", "memory", _text(rng, vocab, 2_000, 8_000), "ok"))
        turn.append(make_assistant([make_text(_text(rng, vocab, 300, 1_400))]))
        out.extend(turn)
    # End on a turn without a tool call, so the firing measured clears nothing new.
    out.extend(
        [make_user(_text(rng, vocab, 250, 800)), make_assistant([make_text(_text(rng, vocab, 300, 1_400))])]
    )
    # Steady state: a stored conversation past the byte budget has already had its old results cleared.
    return clear_old_results(out)


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


async def _loop_sample(
    provider: Any, tool: ToolSpec, prior: list[dict[str, Any]], prior_bytes: int, settings: ModelSettings
) -> float:
    """One firing; ``prior_bytes`` is what the stored head row's ``bytes`` column gives the executor."""
    asked = make_user("remember that the staging deploy is on Thursday")
    request = Request(
        system_blocks=["You are a helpful agent.", "Notes: none"],
        messages=[*prior, asked],
        tools=[],
        settings=settings,
    )
    sink = NullSink()
    started = time.perf_counter()
    result = await run_agent_loop(
        request,
        provider,
        [tool],
        sink,
        asyncio.Event(),
        tool_context=ToolContext(run_id="bench"),
        transcript_bytes=prior_bytes + len(canonical_json(asked)) + 1,
    )
    elapsed = time.perf_counter() - started
    if result.status != "finished" or result.iterations != 2 or sink.count != 3:
        raise SystemExit(
            f"unexpected run: {result.status}, {result.iterations} iterations, {sink.count} commits"
        )
    return elapsed / result.iterations


async def _provider_sample(provider: Any, prior: list[dict[str, Any]], settings: ModelSettings) -> float:
    request = Request(
        system_blocks=["You are a helpful agent."],
        messages=[*prior, make_user("tell me something")],
        tools=[],
        settings=settings,
    )
    started = time.perf_counter()
    async for _event in provider.stream(request):
        pass
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--history", default="0,200,1000")
    args = parser.parse_args()
    settings = ModelSettings(context_window=10_000_000)
    provider = get_provider(settings, config=ProviderConfig(offline_delay_ms=0))
    store: dict[str, str] = {}

    async def async_tool(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        store[context.tool_call_id or ""] = arguments.get("content", "")
        return {"memory": {"memory_id": "mem_1", "content": arguments.get("content", ""), "version": 1}}

    def sync_tool(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        store[context.tool_call_id or ""] = arguments.get("content", "")
        return {"memory": {"memory_id": "mem_1", "content": arguments.get("content", ""), "version": 1}}

    tools = {
        "loop + async tool": ToolSpec("memory", "Memory.", SCHEMA, async_tool),
        "loop + sync tool (to_thread)": ToolSpec("memory", "Memory.", SCHEMA, sync_tool),
    }
    rows: list[tuple[str, int, float, float]] = []
    headline: float | None = None
    for n in [int(x) for x in args.history.split(",")]:
        prior = history(n)
        prior_bytes = len(canonical_json(prior).encode())
        size_kb = prior_bytes / 1024
        print(f"history={n}: {len(prior)} messages, {size_kb:.0f} KB", file=sys.stderr)
        samples: dict[str, list[float]] = {name: [] for name in [*tools, "offline provider alone (1 req)"]}
        for _ in range(50):  # warm-up
            await _loop_sample(provider, tools["loop + async tool"], prior, prior_bytes, settings)
        for _ in range(args.samples):  # interleaved so drift hits every row alike
            for name, tool in tools.items():
                samples[name].append(await _loop_sample(provider, tool, prior, prior_bytes, settings))
            samples["offline provider alone (1 req)"].append(
                await _provider_sample(provider, prior, settings)
            )
        for name, values in samples.items():
            median, p95 = statistics.median(values) * 1000, _percentile(values, 0.95) * 1000
            rows.append((name, n, median, p95))
            if name == "loop + async tool" and n == 0:
                headline = median
        print(f"history={n}: done", file=sys.stderr)

    provider_median = {n: median for name, n, median, _ in rows if name == "offline provider alone (1 req)"}
    print(
        f"{'case':<30} {'history msgs':>12} {'median ms/iter':>15} {'p95 ms/iter':>12} {'loop-only ms':>13}"
    )
    for name, n, median, p95 in rows:
        own = "" if name == "offline provider alone (1 req)" else f"{median - provider_median[n]:.3f}"
        print(f"{name:<30} {n:>12} {median:>15.3f} {p95:>12.3f} {own:>13}")
    worst = max(r[2] for r in rows if r[0] != "offline provider alone (1 req)")
    print(
        f"VERDICT: agent loop per iteration {headline:.3f} ms median with no history (offline model and "
        f"in-memory tool included); worst median {worst:.3f} ms across histories up to the largest and both "
        f"tool kinds; target ≤ 2 ms excluding the database: {'MET' if worst <= 2.0 else 'MISSED'}"
    )


if __name__ == "__main__":
    asyncio.run(main())
