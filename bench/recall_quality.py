"""Benchmark: recall quality of memory_recall against Okapi BM25, on PostgreSQL and on SQLite.

The labelled set `bench/data/recall_set.json` holds items (loaded in file order, so the last ones are the
most recently updated) and queries, each with the ids of the items that answer it, in eight kinds: natural
questions, single keywords, morphology, prefixes, typos, abbreviations, stop-word-only questions (answered by
the most recently updated items) and multi-fact questions. Each database runs in its own process: it
migrates a fresh database, remembers every item through `memory_remember` and asks every query through
`memory_recall` (the selector behind the tool, the API and the panel).

The baseline is `rank_bm25.BM25Okapi` over the same items (title, category, tags and content) and queries,
tokenized the same way as recall reads them (words of letters and digits, lower-cased, English stop words
dropped, Porter stems); an item is retrieved when its BM25 score is above zero. With `OPENCOMPANY_EMBEDDER`
set, recall with the embedder (hybrid) is measured as a third column.

Prints recall@1, recall@5 and MRR (over the top 10) per kind and overall, the share of queries whose top-5
ids are the same on both databases (with the exceptions), and a VERDICT line. Not a test.

Run: .venv/bin/python bench/recall_quality.py   (needs PostgreSQL on 127.0.0.1:5432 and the `bench` extra;
creates BENCH_RECALL_DATABASE_URL, default opencompany_bench_recall, and a temporary SQLite file)
"""

from __future__ import annotations

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
DATA = ROOT / "bench" / "data" / "recall_set.json"
PG_URL = os.environ.get(
    "BENCH_RECALL_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/opencompany_bench_recall"
)
TOP = 10
KINDS = ["natural", "keyword", "morphology", "prefix", "typo", "abbreviation", "stopwords", "multifact"]


def load_set() -> dict[str, Any]:
    return json.loads(DATA.read_text())


def relevant_of(query: dict[str, Any], items: list[dict[str, Any]]) -> list[str]:
    if "relevant_recent" in query:
        return [item["id"] for item in items[-int(query["relevant_recent"]) :]]
    return list(query["relevant"])


# --- one database, in a child process -------------------------------------------------------------


def _ensure_pg_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def run_child(vendor: str, out: Path) -> None:
    embedder = os.environ.get("OPENCOMPANY_EMBEDDER", "none")
    env = {
        "DJANGO_SETTINGS_MODULE": "opencompany.settings",
        "LOG_LEVEL": "WARNING",
        "DEBUG": "0",
        "SECRET_KEY": "bench-only-not-secret",
        "OPENCOMPANY_EMBEDDER": embedder,
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

    from graphs.models import Workflow
    from memory.scope import memory_scope
    from memory.selectors import memory_recall
    from memory.services import memory_index_rebuild, memory_remember

    data = load_set()
    owner = get_user_model().objects.create(username="recall-bench")
    node = {"id": "mem", "type": "simpleMemory", "data": {"parameters": {"reset_policy": "preserve"}}}
    workflow = Workflow.objects.create(
        owner=owner, name="recall-bench", graph={"graphVersion": 2, "nodes": [node], "edges": []}
    )
    scope = memory_scope(workflow=workflow, memory_node_id="mem")
    settings.OPENCOMPANY_EMBEDDER = "none"
    by_memory_id: dict[str, str] = {}
    for item in data["items"]:
        result = memory_remember(
            scope=scope,
            content=item["content"],
            title=item.get("title"),
            category=item.get("category"),
            tags=item.get("tags"),
            actor="owner:bench",
        )
        by_memory_id[result.memory["id"]] = item["id"]

    def ask() -> list[list[str]]:
        answers = []
        for query in data["queries"]:
            page = memory_recall(scope=scope, query=query["query"], limit=TOP)
            answers.append([by_memory_id[i["id"]] for i in page.items])
        return answers

    results: dict[str, Any] = {"ours": ask()}
    if embedder != "none":
        settings.OPENCOMPANY_EMBEDDER = embedder
        memory_index_rebuild(workflow_id=workflow.pk)
        results["ours+embedder"] = ask()
    out.write_text(json.dumps(results))


# --- the baseline and the report ------------------------------------------------------------------


def bm25_answers(data: dict[str, Any]) -> list[list[str]]:
    from rank_bm25 import BM25Okapi

    from memory.search.query import STOP_WORDS, WORD_RE, stem

    def tokens(text: str) -> list[str]:
        return [stem(w) for w in (t.lower() for t in WORD_RE.findall(text)) if w not in STOP_WORDS]

    items = data["items"]
    corpus = [
        tokens(
            " ".join(
                [i.get("title") or "", i.get("category") or "", " ".join(i.get("tags") or []), i["content"]]
            )
        )
        for i in items
    ]
    bm25 = BM25Okapi(corpus)
    answers = []
    for query in data["queries"]:
        scores = bm25.get_scores(tokens(query["query"]))
        ranked = sorted(range(len(items)), key=lambda n: (-scores[n], -n))
        answers.append([items[n]["id"] for n in ranked if scores[n] > 0][:TOP])
    return answers


def metrics(answers: list[list[str]], data: dict[str, Any]) -> dict[str, dict[str, float]]:
    sums: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "r1": 0.0, "r5": 0.0, "mrr": 0.0})
    for query, got in zip(data["queries"], answers, strict=True):
        relevant = set(relevant_of(query, data["items"]))
        first = next((rank for rank, item in enumerate(got, start=1) if item in relevant), None)
        for kind in (query["kind"], "overall"):
            row = sums[kind]
            row["n"] += 1
            row["r1"] += len(relevant & set(got[:1])) / len(relevant)
            row["r5"] += len(relevant & set(got[:5])) / len(relevant)
            row["mrr"] += 1.0 / first if first else 0.0
    return {
        kind: {
            "n": row["n"],
            "r1": row["r1"] / row["n"],
            "r5": row["r5"] / row["n"],
            "mrr": row["mrr"] / row["n"],
        }
        for kind, row in sums.items()
    }


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        run_child(sys.argv[2], Path(sys.argv[3]))
        return
    data = load_set()
    runs: dict[str, dict[str, list[list[str]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for vendor in ("postgresql", "sqlite"):
            out = Path(tmp) / f"{vendor}.json"
            subprocess.run([sys.executable, __file__, "--child", vendor, str(out)], check=True, cwd=ROOT)
            runs[vendor] = json.loads(out.read_text())
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opencompany.settings")
    baseline = bm25_answers(data)

    systems: list[tuple[str, list[list[str]]]] = [("BM25 (rank-bm25)", baseline)]
    for vendor, label in (("postgresql", "PostgreSQL"), ("sqlite", "SQLite")):
        for name, answers in runs[vendor].items():
            systems.append((f"{name} on {label}", answers))
    scored = {name: metrics(answers, data) for name, answers in systems}

    kinds = [k for k in KINDS if k in scored["BM25 (rank-bm25)"]] + ["overall"]
    print(f"{len(data['items'])} items, {len(data['queries'])} queries; recall@k and MRR over the top {TOP}")
    print("| kind | queries | system | recall@1 | recall@5 | MRR |")
    print("|---|---:|---|---:|---:|---:|")
    for kind in kinds:
        for name, _ in systems:
            row = scored[name][kind]
            print(f"| {kind} | {row['n']} | {name} | {row['r1']:.3f} | {row['r5']:.3f} | {row['mrr']:.3f} |")

    pg, lite = runs["postgresql"]["ours"], runs["sqlite"]["ours"]
    differ = [q["query"] for q, a, b in zip(data["queries"], pg, lite, strict=True) if a[:5] != b[:5]]
    same = 1 - len(differ) / len(data["queries"])
    print(
        f"same top-5 ids on PostgreSQL and SQLite: {same:.1%} of queries"
        + (f"; differ: {differ}" if differ else "")
    )

    failed = []
    bm = scored["BM25 (rank-bm25)"]
    for label in ("PostgreSQL", "SQLite"):
        ours = scored[f"ours on {label}"]
        if ours["overall"]["r5"] < 0.9:
            failed.append(f"recall@5 {ours['overall']['r5']:.3f} < 0.9 on {label}")
        failed.extend(
            f"{kind} {metric} below BM25 on {label}"
            for kind in kinds
            for metric in ("r5", "mrr")
            if ours[kind][metric] + 1e-9 < bm[kind][metric]
        )
    if same < 0.95:
        failed.append(f"parity {same:.1%} < 95%")
    verdict = "PASS" if not failed else "FAIL (" + "; ".join(failed) + ")"
    pg_row, lite_row = scored["ours on PostgreSQL"]["overall"], scored["ours on SQLite"]["overall"]
    print(
        f"VERDICT: {verdict} — recall@5 {pg_row['r5']:.3f} / MRR {pg_row['mrr']:.3f} on PostgreSQL, "
        f"{lite_row['r5']:.3f} / {lite_row['mrr']:.3f} on SQLite, against Okapi BM25 {bm['overall']['r5']:.3f} / "
        f"{bm['overall']['mrr']:.3f} (ours ≥ BM25 on recall@5 and MRR in every kind: "
        f"{'yes' if not [f for f in failed if 'below BM25' in f] else 'no'}); same top-5 on both databases for "
        f"{same:.1%} of queries"
    )


if __name__ == "__main__":
    main()
