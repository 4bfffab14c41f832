"""Benchmark: recall quality of memory_recall against Okapi BM25, on public sets and the own set, on
PostgreSQL and on SQLite.

Public sets (bench/public_sets.py, read at run time from repository snapshots; provenance in
bench/data/PUBLIC_SETS.md): LongMemEval-S (a sample of questions per type, each over its own history of
about 450 chat turns) and REALTALK (ten real 21-day conversations, about 9,000 turns). Every dialogue turn
is an item (`speaker: text`, the day as title) of its conversation's namespace; a question's relevant
items are the turns its authors labelled as evidence. The own set, `bench/data/recall_set.json` (items
and queries written by the people who tune recall, in eight kinds), is reported apart.

Each database runs in its own process: it migrates a fresh database, remembers every item through
`memory_remember` and asks every question through `memory_recall` (the selector behind the tool, the API
and the panel). With `OPENCOMPANY_EMBEDDER` set, recall with that embedder (hybrid) is measured too, on
the sets BENCH_HYBRID_SETS names (default the own set and REALTALK), every item embedded once and the
vectors cached for the second database (BENCH_EMBED_CACHE).

Two baselines, `rank_bm25.BM25Okapi` over the same texts (title, category, tags and content) per
namespace: plain (lower-cased words of letters and digits) and with English stop words dropped and
Snowball (English) stems; an item is retrieved when its score is above zero.

Prints recall@5, recall@10 and MRR (over the top 10) per question type and overall for each set, the
share of questions whose top-5 ids are the same on both databases, and a VERDICT line: on each public
set recall@5 at least the stronger BM25's + 0.08 on both databases, and the same top 5 on both for at
least 95% of all questions; the own set keeps its own line (recall@5 ≥ 0.9, never below BM25 per kind).
Not a test.

Run: .venv/bin/python bench/recall_quality.py   (PostgreSQL on 127.0.0.1:5432 and the `bench` extra;
creates BENCH_RECALL_DATABASE_URL, default opencompany_bench_recall, and a temporary SQLite file;
BENCH_SETS=own,longmemeval,realtalk chooses the sets)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # after the apps: bench/conversations.py is not the app

from public_sets import Item, Namespace, PublicSet, Question, longmemeval, realtalk  # noqa: E402

DATA = ROOT / "bench" / "data" / "recall_set.json"
PG_URL = os.environ.get(
    "BENCH_RECALL_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/opencompany_bench_recall"
)
SETS = os.environ.get("BENCH_SETS", "own,longmemeval,realtalk").split(",")
EMBED_CACHE = Path(
    os.environ.get("BENCH_EMBED_CACHE", str(Path(tempfile.gettempdir()) / "recall-bench-vectors"))
)
TOP = 10
OWN_KINDS = ["natural", "keyword", "morphology", "prefix", "typo", "abbreviation", "stopwords", "multifact"]
MARGIN = 0.08
# The sets recall with an embedder is measured on: every item is embedded once (cached across the two
# databases), and LongMemEval's long turns take the local embedder about a tenth of a second each.
HYBRID_SETS = os.environ.get("BENCH_HYBRID_SETS", "own set,REALTALK").split(",")


def own_set() -> PublicSet:
    """The labelled set written here: one namespace; `relevant_recent: n` means the n items loaded last."""
    data = json.loads(DATA.read_text())
    ns = Namespace(id="own")
    for item in data["items"]:
        ns.items.append(
            Item(
                id=item["id"],
                content=item["content"],
                title=item.get("title"),
                category=item.get("category"),
                tags=list(item.get("tags") or []),
            )
        )
    for n, query in enumerate(data["queries"]):
        if "relevant_recent" in query:
            relevant = [item.id for item in ns.items[-int(query["relevant_recent"]) :]]
        else:
            relevant = list(query["relevant"])
        ns.questions.append(
            Question(id=f"own:{n}", text=query["query"], type=query["kind"], relevant=relevant)
        )
    return PublicSet("own set", "bench/data/recall_set.json", [ns])


def load_sets() -> list[PublicSet]:
    makers = {"own": own_set, "longmemeval": longmemeval, "realtalk": realtalk}
    return [makers[name]() for name in SETS]


# --- one database, in a child process -------------------------------------------------------------


def _ensure_pg_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


class CachedEmbedder:
    """The configured embedder with its vectors kept on disk by text, so the second database's run
    embeds nothing again (bench only)."""

    def __init__(self) -> None:
        from memory import embeddings as emb

        self._inner = emb.embedder_for(os.environ["BENCH_INNER_EMBEDDER"])
        self.model_name = self._inner.model_name
        self._dir = EMBED_CACHE / hashlib.sha256(self.model_name.encode()).hexdigest()[:16]
        self._dir.mkdir(parents=True, exist_ok=True)

    def embed(self, texts: list[str]) -> list[list[float]]:
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        found: dict[str, list[float]] = {}
        for key in keys:
            path = self._dir / key
            if path.exists():
                found[key] = json.loads(path.read_text())
        missing = [(k, t) for k, t in zip(keys, texts, strict=True) if k not in found]
        if missing:
            for (key, _), vector in zip(missing, self._inner.embed([t for _, t in missing]), strict=True):
                found[key] = list(vector)
                (self._dir / key).write_text(json.dumps(found[key]))
        return [found[k] for k in keys]


def cached_embedder() -> CachedEmbedder:
    return CachedEmbedder()


def run_child(vendor: str, out: Path) -> None:
    embedder = os.environ.get("OPENCOMPANY_EMBEDDER", "none")
    env = {
        "DJANGO_SETTINGS_MODULE": "opencompany.settings",
        "LOG_LEVEL": "WARNING",
        "DEBUG": "0",
        "SECRET_KEY": "bench-only-not-secret",
        "OPENCOMPANY_EMBEDDER": "none",
        "OPENCOMPANY_MEMORY_MAX_ITEMS": "100000",
    }
    if vendor == "postgresql":
        _ensure_pg_database(PG_URL)
        env["DATABASE_URL"] = PG_URL
    else:
        env["DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp(prefix='recall-bench-')}/db.sqlite3"
    os.environ.update(env)

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection

    from graphs.models import Workflow
    from memory.scope import memory_scope
    from memory.selectors import memory_recall
    from memory.services import memory_index_rebuild, memory_remember

    if vendor == "postgresql":
        with connection.cursor() as cursor:
            # Loading tens of thousands of items one durable commit each would time the disk, not recall.
            cursor.execute("SET synchronous_commit TO off")
    sets = load_sets()
    owner = get_user_model().objects.create(username="recall-bench")
    namespaces = [ns for s in sets for ns in s.namespaces]
    workflows = {}  # one per set, so the embedder pass can embed some sets only
    scopes = {}
    for s in sets:
        nodes = [
            {"id": ns.id, "type": "simpleMemory", "data": {"parameters": {"reset_policy": "preserve"}}}
            for ns in s.namespaces
        ]
        workflows[s.name] = Workflow.objects.create(
            owner=owner, name=s.name, graph={"graphVersion": 2, "nodes": nodes, "edges": []}
        )
        scopes |= {
            ns.id: memory_scope(workflow=workflows[s.name], memory_node_id=ns.id) for ns in s.namespaces
        }
    by_memory_id: dict[str, str] = {}
    for ns in namespaces:
        for item in ns.items:
            result = memory_remember(
                scope=scopes[ns.id],
                content=item.content,
                title=item.title,
                category=item.category,
                tags=item.tags or None,
                actor="owner:bench",
            )
            by_memory_id[result.memory["id"]] = item.id
    print(f"{vendor}: {len(by_memory_id)} items remembered", file=sys.stderr)

    def ask(chosen: list[PublicSet]) -> dict[str, list[list[str]]]:
        answers: dict[str, list[list[str]]] = {}
        for s in chosen:
            rows = answers[s.name] = []
            for ns in s.namespaces:
                for q in ns.questions:
                    page = memory_recall(scope=scopes[ns.id], query=q.text, limit=TOP)
                    rows.append([by_memory_id[i["id"]] for i in page.items])
        return answers

    results: dict[str, Any] = {"ours": ask(sets)}
    if embedder != "none":
        os.environ["BENCH_INNER_EMBEDDER"] = embedder
        settings.OPENCOMPANY_EMBEDDER = "recall_quality.cached_embedder"
        embedded = [s for s in sets if s.name in HYBRID_SETS]
        for s in embedded:
            memory_index_rebuild(workflow_id=workflows[s.name].pk)
        results["ours+embedder"] = ask(embedded)
    out.write_text(json.dumps(results))


# --- the baselines and the report -----------------------------------------------------------------


def _text(item: Item) -> str:
    return " ".join([item.title or "", item.category or "", " ".join(item.tags), item.content])


def bm25_answers(sets: list[PublicSet], *, stems: bool) -> dict[str, list[list[str]]]:
    from rank_bm25 import BM25Okapi

    from memory.search.query import STOP_WORDS, WORD_RE

    if stems:
        import snowballstemmer

        stemmer = snowballstemmer.stemmer("english")

        def tokens(text: str) -> list[str]:
            words = [w for w in (t.lower() for t in WORD_RE.findall(text)) if w not in STOP_WORDS]
            return list(stemmer.stemWords(words))

    else:

        def tokens(text: str) -> list[str]:
            return [t.lower() for t in WORD_RE.findall(text)]

    answers: dict[str, list[list[str]]] = {}
    for s in sets:
        rows = answers[s.name] = []
        for ns in s.namespaces:
            bm25 = BM25Okapi([tokens(_text(item)) for item in ns.items])
            for q in ns.questions:
                scores = bm25.get_scores(tokens(q.text))
                ranked = sorted(range(len(ns.items)), key=lambda n: (-scores[n], -n))
                rows.append([ns.items[n].id for n in ranked if scores[n] > 0][:TOP])
    return answers


def metrics(answers: list[list[str]], questions: list[Question]) -> dict[str, dict[str, float]]:
    sums: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "r5": 0.0, "r10": 0.0, "mrr": 0.0})
    for q, got in zip(questions, answers, strict=True):
        relevant = set(q.relevant)
        first = next((rank for rank, item in enumerate(got, start=1) if item in relevant), None)
        for kind in (q.type, "overall"):
            row = sums[kind]
            row["n"] += 1
            row["r5"] += len(relevant & set(got[:5])) / len(relevant)
            row["r10"] += len(relevant & set(got[:10])) / len(relevant)
            row["mrr"] += 1.0 / first if first else 0.0
    return {
        kind: {"n": r["n"], **{m: r[m] / r["n"] for m in ("r5", "r10", "mrr")}} for kind, r in sums.items()
    }


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        run_child(sys.argv[2], Path(sys.argv[3]))
        return
    sets = load_sets()
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for vendor in ("postgresql", "sqlite"):
            out = Path(tmp) / f"{vendor}.json"
            subprocess.run([sys.executable, __file__, "--child", vendor, str(out)], check=True, cwd=ROOT)
            runs[vendor] = json.loads(out.read_text())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")
    baselines = {
        "BM25 plain": bm25_answers(sets, stems=False),
        "BM25 stop words + stems": bm25_answers(sets, stems=True),
    }

    failed: list[str] = []
    summary: list[str] = []
    all_same = all_total = 0
    for s in sets:
        systems: list[tuple[str, list[list[str]]]] = [
            (name, answers[s.name]) for name, answers in baselines.items()
        ]
        for vendor, label in (("postgresql", "PostgreSQL"), ("sqlite", "SQLite")):
            for name, answers in runs[vendor].items():
                if s.name in answers:
                    systems.append((f"{name} on {label}", answers[s.name]))
        scored = {name: metrics(answers, s.questions) for name, answers in systems}
        kinds = sorted(
            {q.type for q in s.questions}, key=lambda k: (OWN_KINDS.index(k) if k in OWN_KINDS else 99, k)
        )
        print(
            f"\n### {s.name}: {sum(len(ns.items) for ns in s.namespaces):,} items in {len(s.namespaces)} namespaces, "
            f"{len(s.questions)} questions ({s.source})\n"
        )
        print("| type | questions | system | recall@5 | recall@10 | MRR |")
        print("|---|---:|---|---:|---:|---:|")
        for kind in [*kinds, "overall"]:
            for name, _ in systems:
                row = scored[name][kind]
                print(
                    f"| {kind} | {row['n']} | {name} | {row['r5']:.3f} | {row['r10']:.3f} | {row['mrr']:.3f} |"
                )
        pg, lite = runs["postgresql"]["ours"][s.name], runs["sqlite"]["ours"][s.name]
        differ = [q.text for q, a, b in zip(s.questions, pg, lite, strict=True) if a[:5] != b[:5]]
        all_same += len(s.questions) - len(differ)
        all_total += len(s.questions)
        same = 1 - len(differ) / len(s.questions)
        print(
            f"\nsame top-5 ids on PostgreSQL and SQLite: {same:.1%} of questions"
            + (f"; differ: {differ[:10]}" if differ else "")
        )
        strongest = max(scored[name]["overall"]["r5"] for name in baselines)
        if s.name == "own set":
            bm = scored["BM25 stop words + stems"]
            for label in ("PostgreSQL", "SQLite"):
                ours = scored[f"ours on {label}"]
                if ours["overall"]["r5"] < 0.9:
                    failed.append(f"own set recall@5 {ours['overall']['r5']:.3f} < 0.9 on {label}")
                failed.extend(
                    f"own set {kind} {metric} below BM25 on {label}"
                    for kind in [*kinds, "overall"]
                    for metric in ("r5", "mrr")
                    if ours[kind][metric] + 1e-9 < bm[kind][metric]
                )
            summary.append(
                f"own set recall@5 {scored['ours on PostgreSQL']['overall']['r5']:.3f} / "
                f"{scored['ours on SQLite']['overall']['r5']:.3f} against BM25 {strongest:.3f}"
            )
            continue
        for label in ("PostgreSQL", "SQLite"):
            r5 = scored[f"ours on {label}"]["overall"]["r5"]
            if r5 + 1e-9 < strongest + MARGIN:
                failed.append(f"{s.name} recall@5 {r5:.3f} < {strongest:.3f} + {MARGIN} on {label}")
        hybrid = scored.get("ours+embedder on PostgreSQL")
        summary.append(
            f"{s.name} recall@5 {scored['ours on PostgreSQL']['overall']['r5']:.3f} / "
            f"{scored['ours on SQLite']['overall']['r5']:.3f} against the stronger BM25 {strongest:.3f}"
            + (f" (hybrid {hybrid['overall']['r5']:.3f})" if hybrid else "")
        )
    parity = all_same / all_total
    if parity < 0.95:
        failed.append(f"parity {parity:.1%} < 95%")
    verdict = "PASS" if not failed else "FAIL (" + "; ".join(failed) + ")"
    print(
        f"\nVERDICT: {verdict} — "
        + "; ".join(summary)
        + f" (PostgreSQL / SQLite); same top-5 on both databases for {parity:.1%} of questions"
    )


if __name__ == "__main__":
    main()
