"""Benchmark: the conversation's fidelity badge on PostgreSQL.

The badge is the latest assistant turn's runtime with the lowest fidelity among the turns the
conversation holds (`conversations.selectors.conversation_fidelity`), read on every Context panel
refresh. Compares, in one run on one server, with the same seeded conversations:
  badge   conversation_fidelity (the latest turn, then one distinct list of each row's role and fidelity)
  latest  the latest assistant turn alone (newest first, a few rows at a time)
  page    the rest of the panel's request: the head row and the first message page (limit 1)

at 100 / 1,000 / 5,000 realistic messages (bench/conversations.py's workload, every assistant turn
stamped with a runtime and fidelity), interleaved in a fresh seeded order each round.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/opencompany_bench .venv/bin/python bench/conversation_badge.py
Not a test: prints a table and a VERDICT line.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/opencompany_bench")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")

from bench.conversations import SEED, Workload, _pct, _setup_django, _timed  # noqa: E402

SIZES = [100, 1_000, 5_000]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "60"))
FIDELITIES = ["provider_replayable"] * 6 + ["portable"]


def main() -> None:
    _setup_django()
    from django.contrib.auth import get_user_model

    from conversations.models import AgentConversation, ConversationMessage
    from conversations.selectors import conversation_fidelity, conversation_get, conversation_messages_page
    from conversations.services import conversation_append
    from conversations.types import ConversationKey
    from graphs.models import Workflow
    from opencompany.llm.fidelity import turn_fidelity

    owner, _ = get_user_model().objects.get_or_create(username="bench-badge")
    AgentConversation.objects.filter(owner=owner).delete()
    Workflow.objects.filter(owner=owner).delete()
    workflow = Workflow.objects.create(owner=owner, name="bench-badge")
    rng = random.Random(SEED)
    keys: dict[int, ConversationKey] = {}
    for size in SIZES:
        key = ConversationKey(workflow_id=workflow.pk, generation=size, agent_node_id="agent")
        messages = Workload(SEED + size).conversation(size)
        for message in messages:
            if message["role"] == "assistant":
                message["metadata"] = {
                    "runtime": "openai_compatible",
                    "fidelity": rng.choice(FIDELITIES),
                    "epoch": 1,
                }
        for start in range(0, size, 500):
            conversation_append(key=key, messages=messages[start : start + 500], expected_length=start)
        keys[size] = key

    def latest(key: ConversationKey) -> object:
        rows = ConversationMessage.objects.filter(
            conversation__workflow_id=key.workflow_id,
            conversation__generation=key.generation,
            conversation__agent_node_id=key.agent_node_id,
        ).order_by("-seq")
        for _, wire in rows.values_list("seq", "wire")[:16]:
            found = turn_fidelity(wire)
            if found is not None:
                return found
        return None

    def page(key: ConversationKey) -> object:
        return conversation_get(key=key), conversation_messages_page(key=key, after_seq=0, limit=1)

    systems = {"badge": lambda k: conversation_fidelity(key=k), "latest": latest, "page": page}
    times: dict[tuple[str, int], list[float]] = {(s, n): [] for s in systems for n in SIZES}
    for _ in range(ROUNDS):
        for size in SIZES:
            order = list(systems)
            rng.shuffle(order)
            for name in order:
                times[(name, size)].append(_timed(lambda: systems[name](keys[size])))  # noqa: B023

    print(
        "| messages | badge median ms | badge p95 ms | latest median ms | page median ms | badge / (latest + page) |"
    )
    print("|---|---|---|---|---|---|")
    ratios = []
    for size in SIZES:
        badge = statistics.median(times[("badge", size)])
        rest = statistics.median(times[("latest", size)]) + statistics.median(times[("page", size)])
        ratios.append(badge / rest)
        print(
            f"| {size:,} | {badge:.2f} | {_pct(times[('badge', size)], 0.95):.2f} | "
            f"{statistics.median(times[('latest', size)]):.2f} | {statistics.median(times[('page', size)]):.2f} | "
            f"{badge / rest:.1f}x |"
        )
    AgentConversation.objects.filter(owner=owner).delete()
    workflow.delete()
    worst = max(times[("badge", 5_000)])
    print(
        f"VERDICT: the badge costs {ratios[-1]:.1f}x the latest-turn read plus the panel's page at 5,000 messages "
        f"(median {statistics.median(times[('badge', 5_000)]):.1f} ms, worst {worst:.1f} ms)"
    )


if __name__ == "__main__":
    main()
