"""Benchmark: normalize + validate on realistic workflow graphs of 10 / 100 / 1,000 / 5,000 nodes.

Graphs are generated from a fixed seed: one chat trigger, teams (a lead and 2-6 teammates, chained), every
agent with its Context, a workflow-wide Memory, a Memory per team and some personal Memories, agent
parameters, a few nodes the client just added (non-canonical ids) and a few legacy `input-memory` edges.
Sizes are run interleaved so drift (thermal, other load) spreads over all of them. A second table times
the id-assignment edge cases: 20,000 edges (the default edge cap) without ids, and 20,000 sharing one id.

Run: .venv/bin/python bench/graphs_normalize.py [--runs N]
Pure Python: no database, no Django settings.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from graphs.normalize import normalize_workflow_graph  # noqa: E402
from graphs.validate import validate_workflow  # noqa: E402

SIZES = (10, 100, 1_000, 5_000)
EDGE_CASE_EDGES = 20_000
WORKFLOW_ID = "4711"
TARGET_MS_AT_1K = 20.0


class _Builder:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.nodes: list[dict[str, Any]] = []
        self.edges: list[dict[str, Any]] = []
        self.ordinals: dict[str, int] = {}

    def node(self, node_type: str, x: float, y: float, **parameters: Any) -> str:
        if self.rng.random() < 0.05:  # a node the client just added: not canonical yet
            node_id = f"{node_type}-{1_712_000_000_000 + len(self.nodes)}-{self.rng.randrange(16**6):06x}"
        else:
            self.ordinals[node_type] = self.ordinals.get(node_type, 0) + 1
            node_id = f"{WORKFLOW_ID}:{node_type}:{self.ordinals[node_type]}"
        data: dict[str, Any] = {"label": node_type}
        if parameters:
            data["parameters"] = parameters
        self.nodes.append({"id": node_id, "type": node_type, "position": {"x": x, "y": y}, "data": data})
        return node_id

    def edge(self, source: str, source_handle: str, target: str, target_handle: str) -> None:
        self.edges.append(
            {
                "id": f"xy-edge__{source}{source_handle}-{target}{target_handle}",
                "source": source,
                "target": target,
                "sourceHandle": source_handle,
                "targetHandle": target_handle,
            }
        )

    def agent(self, node_type: str, x: float, y: float, shared_memories: list[str]) -> str:
        agent_id = self.node(
            node_type,
            x,
            y,
            provider=self.rng.choice(["offline", "openai", "anthropic"]),
            model="demo-model",
            system_prompt="You are a helpful member of the team. " * self.rng.randint(1, 8),
            temperature=round(self.rng.uniform(0, 1.5), 2),
            max_output_tokens=self.rng.choice([1024, 4096, 8192]),
        )
        context_id = self.node("context", x - 360, y)
        self.edge(context_id, "output-context", agent_id, "input-context")
        for memory_id in shared_memories:
            self.edge(memory_id, "output-tool", agent_id, "input-tools")
        if self.rng.random() < 0.3:
            personal = self.node("simpleMemory", x, y + 200, reset_policy="preserve")
            if self.rng.random() < 0.1:  # an old graph: legacy continuity edge
                self.nodes[-1]["data"]["parameters"]["memory_content"] = "## Human\nhello\n## AI\nhi"
                self.edge(personal, "output-memory", agent_id, "input-memory")
            else:
                self.edge(personal, "output-tool", agent_id, "input-tools")
        return agent_id


def build_graph(size: int, seed: int = 20_260_101) -> dict[str, Any]:
    rng = random.Random(seed + size)
    builder = _Builder(rng)
    trigger = builder.node("chatTrigger", 0, 0)
    company_memory = builder.node("simpleMemory", 0, 300, reset_policy="preserve")
    previous_lead: str | None = None
    team = 0
    while len(builder.nodes) < size:
        team += 1
        y = team * 600
        team_memory = builder.node("simpleMemory", 600, y + 300, reset_policy="clear")
        lead = builder.agent("teamLead", 600, y, [company_memory, team_memory])
        builder.edge(trigger if previous_lead is None else previous_lead, "output-main", lead, "input-main")
        previous_lead = lead
        previous_mate: str | None = None
        for index in range(rng.randint(2, 6)):
            if len(builder.nodes) >= size:
                break
            mate = builder.agent("aiAgent", 1200 + 400 * index, y, [company_memory, team_memory])
            builder.edge(mate, "output-top", lead, "input-teammates")
            if previous_mate is not None:
                builder.edge(previous_mate, "output-main", mate, "input-main")
            previous_mate = mate
    # Trim to the exact size: drop the last nodes and any edge that touched them.
    kept = builder.nodes[:size]
    kept_ids = {node["id"] for node in kept}
    edges = [e for e in builder.edges if e["source"] in kept_ids and e["target"] in kept_ids]
    return {"graphVersion": 2, "nodes": kept, "edges": edges}


def build_edge_case(edge_id: str | None, edges: int = EDGE_CASE_EDGES) -> dict[str, Any]:
    """A trigger and an agent joined by `edges` parallel edges, all without an id or all with `edge_id`."""
    edge: dict[str, Any] = {
        "source": "t",
        "target": "a",
        "sourceHandle": "output-main",
        "targetHandle": "input-main",
    }
    if edge_id is not None:
        edge["id"] = edge_id
    return {
        "graphVersion": 2,
        "nodes": [
            {"id": "t", "type": "chatTrigger", "position": {"x": 0, "y": 0}, "data": {}},
            {"id": "a", "type": "aiAgent", "position": {"x": 300, "y": 0}, "data": {}},
        ],
        "edges": [dict(edge) for _ in range(edges)],
    }


def run_once(graph: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    result = normalize_workflow_graph(WORKFLOW_ID, graph)
    report = validate_workflow(result.graph)
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, report


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs per size (interleaved), at least 20")
    args = parser.parse_args()
    runs = max(20, args.runs)

    graphs = {size: build_graph(size) for size in SIZES}
    for size, graph in graphs.items():  # warm-up, and a sanity check that the graphs are realistic
        _, report = run_once(graph)
        if report["errors"]:
            raise SystemExit(f"generated {size}-node graph is invalid: {report['errors'][:3]}")

    timings: dict[int, list[float]] = {size: [] for size in SIZES}
    for _ in range(runs):
        for size in SIZES:
            elapsed, _ = run_once(graphs[size])
            timings[size].append(elapsed)

    print(f"normalize_workflow_graph + validate_workflow, {runs} interleaved runs per size\n")
    print("| nodes | edges | median ms | p95 ms | ms per 1k nodes | growth vs previous (time / size) |")
    print("|---:|---:|---:|---:|---:|---|")
    medians: dict[int, float] = {}
    previous: int | None = None
    for size in SIZES:
        median = statistics.median(timings[size])
        medians[size] = median
        p95 = percentile(timings[size], 0.95)
        growth = "—"
        if previous is not None:
            growth = f"{median / medians[previous]:.2f}× / {size / previous:.0f}×"  # noqa: RUF001
        print(
            f"| {size:,} | {len(graphs[size]['edges']):,} | {median:.2f} | {p95:.2f} | "
            f"{median / size * 1000:.2f} | {growth} |"
        )
        previous = size

    edge_cases = {
        "edges without ids": build_edge_case(None),
        "edges sharing one id": build_edge_case("shared"),
    }
    edge_timings: dict[str, list[float]] = {name: [] for name in edge_cases}
    for _ in range(runs):
        for name, graph in edge_cases.items():
            elapsed, report = run_once(graph)
            if report["errors"]:
                raise SystemExit(f"edge case '{name}' is invalid: {report['errors'][:3]}")
            edge_timings[name].append(elapsed)
    print()
    print("| id assignment edge case | edges | median ms | p95 ms |")
    print("|---|---:|---:|---:|")
    for name, values in edge_timings.items():
        print(
            f"| {name} | {EDGE_CASE_EDGES:,} | {statistics.median(values):.2f} | "
            f"{percentile(values, 0.95):.2f} |"
        )

    at_1k = medians[1_000]
    growth_5k = medians[5_000] / at_1k
    linear = growth_5k <= 5 * 1.5
    print()
    print(
        f"VERDICT: {'PASS' if at_1k <= TARGET_MS_AT_1K and linear else 'FAIL'} — "
        f"1,000 nodes {at_1k:.2f} ms (target ≤ {TARGET_MS_AT_1K:.0f} ms), "
        f"growth 5,000/1,000 = {growth_5k:.2f}× for 5× nodes "  # noqa: RUF001
        f"(roughly linear: {'yes' if linear else 'no'})"
    )


if __name__ == "__main__":
    main()
