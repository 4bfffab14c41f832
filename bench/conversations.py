"""Benchmark: per-turn save and load of agent conversations on PostgreSQL.

Compares, in one run on one PostgreSQL server, with the same seeded turns:
  ours      conversations.services.conversation_append (head row + append-only rows) / conversation_load
  jsonb     raw psycopg, one JSONB row per conversation rewritten by an upsert every turn / one SELECT
  langgraph langgraph-checkpoint-postgres PostgresSaver.put (whole channel value per version) / get_tuple

at 10 / 100 / 1,000 / 5,000 realistic messages, plus WAL bytes per turn (pg_current_wal_lsn difference,
median over turns, so unrelated writers on a shared server count as little as possible).

Two modes, each on fresh conversations (BENCH_MODES picks; both by default):
  back-to-back each store's saves in a row, then its loads in a row
  interleaved  the stores take turns in a fresh seeded order each round, so every save finds caches and
               CPUs cooled by the other stores' work (the fastest store pays this most, in proportion)
Every back-to-back phase, and each size's interleaved rounds, start after a CHECKPOINT: the comparisons write
megabytes of WAL per turn, and the checkpoints that forces would otherwise spread their writes over
whichever store's phase came next. Every target must hold in both modes. A "floor" row writes each turn as
one unindexed JSONB row with one INSERT and commit on the same server: the least a durable per-turn write
costs here, for scale.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/opencompany_bench .venv/bin/python bench/conversations.py
(the database is created and migrated when missing). Not a test: prints a table and a VERDICT line.
"""

# B023: every lambda below is called at once by _timed, inside its loop iteration.
# SIM905: the common-words list reads better as one string.
# ruff: noqa: B023, SIM905

from __future__ import annotations

import bisect
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/opencompany_bench")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ.setdefault("DEBUG", "0")  # as deployed: DEBUG logs every query into connection.queries
os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")

SIZES = [10, 100, 1_000, 5_000]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "80"))  # 40 gave medians that moved ±20% between runs here
SEED = 20261129

COMMON = (
    "the of and to a in is it you that he was for on are with as I his they be at one have this from or had "
    "by not word but what some we can out other were all there when up use your how said an each she which do "
    "their time if will way about many then them write would like so these her long make thing see him two has "
    "look more day could go come did number sound no most people my over know water than call first who may "
    "down side been now find any new work part take get place made live where after back little only round man "
    "year came show every good me give our under name very through just form sentence great think say help low "
    "line differ turn cause much mean before move right boy old too same tell does set three want air well also "
    "play small end put home read hand port large spell add even land here must big high such follow act why "
    "ask men change went light kind off need house picture try us again animal point mother world near build "
    "self earth father head stand own page should country found answer school grow study still learn plant "
    "cover food sun four between state keep eye never last let thought city tree cross farm hard start might "
    "story saw far sea draw left late run while press close night real life few north open seem together next "
    "white children begin got walk example ease paper group always music those both mark often letter until "
    "mile river car feet care second book carry took science eat room friend began idea fish mountain stop once "
    "base hear horse cut sure watch color face wood main enough plain girl usual young ready above ever red list"
).split()


def _vocabulary(rng: random.Random, size: int = 30_000) -> list[str]:
    words = list(dict.fromkeys(COMMON))
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    while len(words) < size:
        n = rng.randint(3, 11)
        words.append("".join(rng.choice(letters[: rng.randint(8, 26)]) for _ in range(n)))
    return words


class Workload:
    """Seeded English-like traffic: Zipf(1.05) words; turns of 2 to 4 messages."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.words = _vocabulary(self.rng)
        weights = [1.0 / (rank**1.05) for rank in range(1, len(self.words) + 1)]
        self.cum = list(itertools.accumulate(weights))
        self.calls = 0

    def text(self, low: int, high: int) -> str:
        target = self.rng.randint(low, high)
        out: list[str] = []
        size = 0
        total = self.cum[-1]
        while size < target:
            word = self.words[bisect.bisect_left(self.cum, self.rng.random() * total)]
            out.append(word)
            size += len(word) + 1
        sentence = " ".join(out)[:target]
        return sentence[:1].upper() + sentence[1:] + "."

    def turn(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": self.text(250, 800)}], "metadata": {}}
        ]
        if self.rng.random() < 0.5:
            self.calls += 1
            call_id = f"call_{self.calls}"
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_call",
                            "id": call_id,
                            "name": "memory",
                            "arguments": {"operation": "recall", "query": self.text(20, 60)},
                        }
                    ],
                    "metadata": {},
                }
            )
            messages.append(
                {
                    "role": "tool",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_call_id": call_id,
                            "name": "memory",
                            "content": self.text(2_000, 8_000),
                            "status": "ok",
                        }
                    ],
                    "metadata": {},
                }
            )
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": self.text(300, 1_400)}],
                "metadata": {},
            }
        )
        return messages

    def conversation(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < n:
            out.extend(self.turn())
        return out[:n]


def _ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1].split("?")[0]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def _setup_django() -> None:
    import django
    from django.core.management import call_command

    _ensure_database(os.environ["DATABASE_URL"])
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def main() -> None:
    _setup_django()
    import psycopg
    from django.contrib.auth import get_user_model
    from django.db import connection
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres import PostgresSaver

    import opencompany.core.events as events_module
    from conversations.models import AgentConversation
    from conversations.selectors import conversation_load
    from conversations.services import conversation_append
    from conversations.types import ConversationKey
    from graphs.models import Workflow

    url = os.environ["DATABASE_URL"]
    raw = psycopg.connect(url, autocommit=True)
    wal = psycopg.connect(url, autocommit=True)
    raw.execute("DROP TABLE IF EXISTS bench_jsonb_conversation")
    raw.execute("CREATE TABLE bench_jsonb_conversation (key text PRIMARY KEY, messages jsonb NOT NULL)")
    lg_cm = PostgresSaver.from_conn_string(url)
    saver = lg_cm.__enter__()
    saver.setup()
    raw.execute("DELETE FROM checkpoint_writes; DELETE FROM checkpoint_blobs; DELETE FROM checkpoints")

    owner, _ = get_user_model().objects.get_or_create(username="bench")
    AgentConversation.objects.filter(owner=owner).delete()
    Workflow.objects.filter(owner=owner).delete()
    workflow = Workflow.objects.create(owner=owner, name="bench")

    def lsn() -> str:
        return str(wal.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]

    def wal_since(start: str) -> int:
        row = wal.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (start,)).fetchone()
        return int(row[0])  # type: ignore[index]

    publish = events_module.publish_now

    def checkpoint() -> None:
        """Write out what earlier phases dirtied: this server's requested checkpoints (the other stores
        write megabytes of WAL per turn) otherwise spread their writes over whichever phase comes next."""
        wal.execute("CHECKPOINT")

    def ours(name: str, base: list[dict[str, Any]], *, events: bool) -> System:
        """Our store. Without events the after-commit publish is switched off (the store alone)."""
        key = ConversationKey(workflow_id=workflow.pk, generation=1, agent_node_id=name)
        digest = ""
        for chunk in range(0, len(base), 500):
            digest = conversation_append(
                key=key, messages=base[chunk : chunk + 500], expected_length=chunk
            ).digest
        # The runtime's sink knows the head digest of its previous write and passes it (one statement).
        state: dict[str, Any] = {"length": len(base), "digest": digest}

        def save(turn: list[dict[str, Any]]) -> None:
            if not events:
                events_module.publish_now = lambda *a, **k: None
            try:
                written = conversation_append(
                    key=key, messages=turn, expected_length=state["length"], expected_digest=state["digest"]
                )
            finally:
                events_module.publish_now = publish
            state["length"], state["digest"] = written.length, written.digest

        def check() -> None:
            assert len(conversation_load(key=key)) == state["length"], "our store lost messages"

        return System(save, lambda: conversation_load(key=key), check)

    def jsonb(name: str, base: list[dict[str, Any]]) -> System:
        messages = list(base)
        raw.execute(
            "INSERT INTO bench_jsonb_conversation (key, messages) VALUES (%s, %s)",
            (name, json.dumps(messages)),
        )

        def save(turn: list[dict[str, Any]]) -> None:
            messages.extend(turn)
            raw.execute(
                "INSERT INTO bench_jsonb_conversation (key, messages) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET messages = EXCLUDED.messages",
                (name, json.dumps(messages)),
            )

        def load() -> Any:
            return raw.execute(
                "SELECT messages FROM bench_jsonb_conversation WHERE key = %s", (name,)
            ).fetchone()

        return System(save, load, lambda: None)

    def langgraph(name: str, base: list[dict[str, Any]]) -> System:
        messages = list(base)
        state: dict[str, Any] = {
            "version": 1,
            "config": {"configurable": {"thread_id": name, "checkpoint_ns": ""}},
        }

        def put() -> None:
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"messages": messages}
            checkpoint["channel_versions"] = {"messages": state["version"]}
            state["config"] = saver.put(
                state["config"],
                checkpoint,
                {"source": "loop", "step": state["version"]},
                {"messages": state["version"]},
            )

        def save(turn: list[dict[str, Any]]) -> None:
            messages.extend(turn)
            state["version"] += 1
            put()

        put()
        return System(
            save,
            lambda: saver.get_tuple({"configurable": {"thread_id": name, "checkpoint_ns": ""}}),
            lambda: None,
        )

    raw.execute("DROP TABLE IF EXISTS bench_floor")
    raw.execute("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, turn jsonb NOT NULL)")

    def floor() -> System:
        """The least a durable per-turn write costs here: the turn as one row, one INSERT, one commit."""

        def save(turn: list[dict[str, Any]]) -> None:
            raw.execute("INSERT INTO bench_floor (turn) VALUES (%s)", (json.dumps(turn),))

        return System(save, lambda: None, lambda: None)

    work = Workload()
    results: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    total_bytes: dict[int, int] = {}
    for n in SIZES:
        base = work.conversation(n)
        total_bytes[n] = len(json.dumps(base, separators=(",", ":")).encode())
        turns = [work.turn() for _ in range(ROUNDS)]  # the same turns in both modes
        for mode in MODES:
            systems = {
                "ours": ours(f"{mode}-{n}", base, events=False),
                "ours+event": ours(f"{mode}-ev-{n}", base, events=True),
                "jsonb": jsonb(f"{mode}-{n}", base),
                "langgraph": langgraph(f"{mode}-{n}", base),
                "floor": floor(),
            }
            out = {s: {"save": [], "load": [], "wal": []} for s in systems}
            for s in systems:
                results[(mode, s, n)] = out[s]

            def turn_of(s: str, turn: list[dict[str, Any]]) -> None:
                start = lsn()
                out[s]["save"].append(_timed(lambda: systems[s].save(turn)))
                out[s]["wal"].append(wal_since(start))

            order_rng = random.Random(SEED + n)
            if mode == "back-to-back":
                # Each store's saves in a row, then its loads in a row: the usual microbenchmark. Each
                # phase starts after a checkpoint, so no store's saves pay for the WAL an earlier one wrote.
                for s in systems:
                    checkpoint()
                    for turn in turns:
                        turn_of(s, turn)
                    if s != "floor":
                        out[s]["load"] = [_timed(systems[s].load) for _ in turns]
            else:
                # Turn by turn in a fresh seeded order each round: no store always follows the same one.
                # One checkpoint after the setup; what the stores' own turns write is part of this mode.
                checkpoint()
                for turn in turns:
                    order = order_rng.sample(list(systems), len(systems))
                    for s in order:
                        turn_of(s, turn)
                    for s in order:
                        if s != "floor":
                            out[s]["load"].append(_timed(systems[s].load))
            for system in systems.values():
                system.check()
        connection.close()

    lg_cm.__exit__(None, None, None)
    raw.close()
    wal.close()

    layer = "redis" if os.environ.get("REDIS_URL") else "in-memory"
    print(
        f"rounds per size: {ROUNDS}; seed {SEED}; PostgreSQL {connection.pg_version}; channel layer {layer}; "
        f"modes: {', '.join(MODES)}"
    )
    checks_by_mode: dict[str, list[tuple[str, str, str, bool]]] = {}
    for mode in MODES:
        print()
        print(f"{mode}: {MODE_TEXT[mode]}")
        print()
        print(
            "| messages | JSON size | system | save p50 ms | save p95 ms | load p50 ms | load p95 ms | WAL/turn (median) |"
        )
        print("|---:|---:|---|---:|---:|---:|---:|---:|")
        for n in SIZES:
            for s in ("ours", "ours+event", "jsonb", "langgraph", "floor"):
                r = results[(mode, s, n)]
                load = (
                    f"{statistics.median(r['load']):.2f} | {_pct(r['load'], 0.95):.2f}"
                    if s != "floor"
                    else "n/a | n/a"
                )
                print(
                    f"| {n:,} | {total_bytes[n] / 1024:,.0f} KB | {s} | {statistics.median(r['save']):.2f} | "
                    f"{_pct(r['save'], 0.95):.2f} | {load} | {statistics.median(r['wal']) / 1024:,.1f} KB |"
                )
        checks_by_mode[mode] = _checks(
            {
                (s, n): {m: statistics.median(v[m]) for m in ("save", "load")}
                for (md, s, n), v in results.items()
                if md == mode and s != "floor"
            }
        )
    print()
    for mode, checks in checks_by_mode.items():
        print(
            f"{mode}: "
            + "; ".join(
                f"{name} {value} (target {target}{'' if ok else ', missed'})"
                for name, value, target, ok in checks
            )
        )
    print()
    for mode in MODES:
        ours_1k = statistics.median(results[(mode, "ours", 1_000)]["save"])
        floor_1k = statistics.median(results[(mode, "floor", 1_000)]["save"])
        print(
            f"{mode}: ours {ours_1k:.2f} ms against the floor's {floor_1k:.2f} ms at 1,000 messages "
            f"({ours_1k / floor_1k:.2f}x; the floor writes the turn as one row, unvalidated and unindexed)"
        )
    # Every target in every mode measured.
    verdict = all(ok for checks in checks_by_mode.values() for *_, ok in checks)
    print()
    print(
        "VERDICT: "
        + ("PASS" if verdict else "MISS")
        + " (every target in every mode: "
        + ", ".join(MODES)
        + ")"
    )


MODE_TEXT = {
    "back-to-back": "each store's saves in a row, then its loads in a row (the usual microbenchmark)",
    "interleaved": "the stores take turns, in a fresh seeded order each round (caches and the CPU cool between a "
    "store's turns)",
}
MODES = [m for m in os.environ.get("BENCH_MODES", "back-to-back,interleaved").split(",") if m in MODE_TEXT]


@dataclass
class System:
    save: Callable[[list[dict[str, Any]]], None]
    load: Callable[[], Any]
    check: Callable[[], None]


def _checks(med: dict[tuple[str, int], dict[str, float]]) -> list[tuple[str, str, str, bool]]:
    ours_save = med[("ours", 1_000)]["save"]
    growth = med[("ours", 5_000)]["save"] / med[("ours", 10)]["save"]
    vs_jsonb = med[("jsonb", 1_000)]["save"] / ours_save
    vs_lg = med[("langgraph", 1_000)]["save"] / ours_save
    load_ratio = max(med[("ours", n)]["load"] / med[("jsonb", n)]["load"] for n in SIZES)
    return [
        ("save p50 @1,000", f"{ours_save:.2f} ms", "≤ 1.5 ms", ours_save <= 1.5),
        ("save 5,000 vs 10", f"{growth:.2f}x", "≤ 1.5x", growth <= 1.5),
        ("jsonb/ours save @1,000", f"{vs_jsonb:.1f}x", "≥ 25x", vs_jsonb >= 25),
        ("langgraph/ours save @1,000", f"{vs_lg:.1f}x", "≥ 25x", vs_lg >= 25),
        ("ours/jsonb load (worst size)", f"{load_ratio:.2f}x", "≤ 1.3x", load_ratio <= 1.3),
    ]


if __name__ == "__main__":
    main()
