"""Public, evidence-labelled question sets for bench/recall_quality.py, read from repository snapshots.

Neither set is kept in this repository (one has no licence that allows copying it, the other is too
large): the bench reads them at run time from bare git snapshots, at pinned commits. Bring them with
the search tool's `fetch` (`github:hussainzs/Memoria`, `github:danny911kr/REALTALK`), which puts them
under /work/.mirror/<owner>+<name>/repo, or clone the repositories anywhere and point
BENCH_LONGMEMEVAL_GIT / BENCH_REALTALK_GIT at their git directories. bench/data/PUBLIC_SETS.md records
the provenance and licences.

Each set is a list of namespaces; a namespace holds items (loaded in order) and questions whose
relevant items are the evidence the set's authors labelled. Dialogue turns become items as an agent
would write them: the turn's words as content (`speaker: text`), the day it was said as title.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

CONTENT_MAX = 50_000  # the Memory tool's content limit: longer turns are cut for every system alike

LONGMEMEVAL = {
    "name": "LongMemEval-S",
    "git": os.environ.get("BENCH_LONGMEMEVAL_GIT", "/work/.mirror/hussainzs+Memoria/repo"),
    "commit": "959167b875ddc992661da1cf1a3263821e6831ed",
    "path": "evaluations/data/lme_jsons",
}
REALTALK = {
    "name": "REALTALK",
    "git": os.environ.get("BENCH_REALTALK_GIT", "/work/.mirror/danny911kr+REALTALK/repo"),
    "commit": "b903e06a9770bf4e5fe9018c3e132889666d3b4a",
    "path": "data",
}
# Questions per LongMemEval type (abstention questions have no evidence and are left out): each brings
# its own history of about 450 turns, so the whole set (500 questions) would take an hour to load.
LONGMEMEVAL_PER_TYPE = int(os.environ.get("BENCH_LONGMEMEVAL_PER_TYPE", "10"))
REALTALK_TYPES = {1: "multi-hop", 2: "temporal", 3: "inference"}


@dataclass
class Item:
    id: str
    content: str
    title: str | None = None
    category: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class Question:
    id: str
    text: str
    type: str
    relevant: list[str]


@dataclass
class Namespace:
    id: str
    items: list[Item] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


@dataclass
class PublicSet:
    name: str
    source: str
    namespaces: list[Namespace]

    @property
    def questions(self) -> list[Question]:
        return [q for ns in self.namespaces for q in ns.questions]


def _git(repo: dict[str, str], *args: str) -> str:
    if not Path(repo["git"]).exists():
        raise SystemExit(
            f"{repo['name']}: no snapshot at {repo['git']} (fetch it, or set the BENCH_*_GIT variable; "
            "see bench/public_sets.py)"
        )
    return subprocess.run(
        ["git", "--git-dir", repo["git"], *args], check=True, capture_output=True, text=True
    ).stdout


def _day(value: datetime) -> str:
    return f"{value.day} {value:%B %Y}"


def longmemeval() -> PublicSet:
    """LongMemEval-S (the cleaned release): each question has its own history of about 50 sessions
    of user-assistant chat; the turns holding the answer are labelled `has_answer`. The first
    `LONGMEMEVAL_PER_TYPE` questions of each type, by question id, each in its own namespace."""
    repo = LONGMEMEVAL
    listing = _git(repo, "ls-tree", "-r", "--name-only", repo["commit"], repo["path"])
    by_id: dict[str, str] = {}
    for path in listing.split():
        name = path.rsplit("/", 1)[1].removesuffix(".json")
        sessions, _, question_id = name.partition("_")
        # LongMemEval-S histories hold 30 to 100 sessions; the oracle's 1 to 6, LongMemEval-M's 400+.
        if sessions.isdigit() and 30 <= int(sessions) < 100 and not question_id.endswith("_abs"):
            by_id[question_id] = path
    per_type: dict[str, int] = {}
    namespaces = []
    for question_id in sorted(by_id):
        raw = json.loads(_git(repo, "show", f"{repo['commit']}:{by_id[question_id]}"))
        kind = raw["question_type"]
        if per_type.get(kind, 0) >= LONGMEMEVAL_PER_TYPE:
            continue
        ns = Namespace(id=f"lme-{question_id}")
        relevant = []
        for s, (session, date) in enumerate(
            zip(raw["haystack_sessions"], raw["haystack_dates"], strict=True)
        ):
            day = _day(datetime.strptime(date.split(" (")[0], "%Y/%m/%d"))
            for t, turn in enumerate(session):
                text = turn["content"].strip()
                if not text:
                    continue
                item = Item(
                    id=f"{question_id}:{s}:{t}", content=text[:CONTENT_MAX], title=day, category=turn["role"]
                )
                ns.items.append(item)
                if turn.get("has_answer"):
                    relevant.append(item.id)
        if not relevant:
            continue
        per_type[kind] = per_type.get(kind, 0) + 1
        ns.questions.append(Question(id=question_id, text=raw["question"], type=kind, relevant=relevant))
        namespaces.append(ns)
    source = f"github.com/hussainzs/Memoria@{repo['commit'][:12]}:{repo['path']} (LongMemEval, MIT)"
    return PublicSet(repo["name"], source, namespaces)


def realtalk() -> PublicSet:
    """REALTALK: ten 21-day messaging-app conversations between real people, each with questions
    whose evidence is a list of turn ids; one namespace per conversation, every non-empty turn an
    item. Evidence ids that name no turn with text are dropped, and questions left without any."""
    repo = REALTALK
    listing = _git(repo, "ls-tree", "--name-only", repo["commit"], f"{repo['path']}/")
    namespaces = []
    # Only the conversations at the top of data/: its subfolders hold other sets.
    for path in sorted(p for p in listing.split() if p.endswith(".json")):
        raw: dict[str, Any] = json.loads(_git(repo, "show", f"{repo['commit']}:{path}"))
        ns = Namespace(id="realtalk-" + Path(path).stem)
        for key in sorted(
            (k for k in raw if k.startswith("session_") and isinstance(raw[k], list)), key=_session_number
        ):
            for turn in raw[key]:
                text = (turn.get("clean_text") or "").strip()
                if not text:
                    continue
                day = _day(datetime.strptime(turn["date_time"], "%d.%m.%Y, %H:%M:%S"))
                ns.items.append(
                    Item(
                        id=f"{ns.id}:{turn['dia_id']}",
                        content=f"{turn['speaker']}: {text}"[:CONTENT_MAX],
                        title=day,
                    )
                )
        known = {item.id for item in ns.items}
        for n, qa in enumerate(raw["qa"]):
            relevant = [f"{ns.id}:{e}" for e in qa.get("evidence", []) if f"{ns.id}:{e}" in known]
            if relevant:
                kind = REALTALK_TYPES.get(int(qa["category"]), f"category {qa['category']}")
                ns.questions.append(
                    Question(id=f"{ns.id}:q{n}", text=qa["question"], type=kind, relevant=relevant)
                )
        namespaces.append(ns)
    source = f"github.com/danny911kr/REALTALK@{repo['commit'][:12]}:{repo['path']}/*.json (no licence stated)"
    return PublicSet(repo["name"], source, namespaces)


def _session_number(key: str) -> int:
    return int(key.split("_")[1])


def load_public_sets() -> list[PublicSet]:
    return [longmemeval(), realtalk()]
