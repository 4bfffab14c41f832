"""The limits check on a graph's counts, size, nesting and parameters (pure, no database)."""

from __future__ import annotations

from graphs.limits import (
    MAX_NODE_PARAMETERS_CHARS,
    MAX_VALUE_DEPTH,
    GraphLimits,
    LimitBreach,
    graph_limit_breach,
)

LIMITS = GraphLimits(max_nodes=10, max_edges=20, max_chars=10_000)


def _node(node_id, **data):
    return {"id": node_id, "type": "aiAgent", "position": {"x": 0, "y": 0}, "data": data}


def _nested(depth):
    value: object = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def test_a_graph_within_every_limit_passes():
    nodes = [_node("a", label="Agent", parameters={"system_prompt": "x" * 5_000})]
    edges = [{"id": "e", "source": "a", "target": "a"}]

    assert graph_limit_breach(nodes=nodes, edges=edges, limits=LIMITS) is None


def test_too_many_nodes_or_edges_is_graph_too_large_with_the_counts():
    nodes = [_node(f"n{i}") for i in range(11)]

    breach = graph_limit_breach(nodes=nodes, edges=[], limits=LIMITS)

    assert breach == LimitBreach(
        "graph_too_large",
        "A graph may hold at most 10 nodes and 20 edges.",
        {"nodes": 11, "edges": 0, "max_nodes": 10, "max_edges": 20, "limit": "nodes"},
    )
    edges_breach = graph_limit_breach(nodes=[], edges=[{}] * 21, limits=LIMITS)
    assert edges_breach is not None
    assert edges_breach.extra["limit"] == "edges"


def test_nodes_and_edges_larger_than_max_chars_are_graph_too_large():
    nodes = [_node("a", label="x" * 6_000)]
    edges = [{"id": "e", "source": "a", "target": "a", "label": "y" * 4_000}]

    breach = graph_limit_breach(nodes=nodes, edges=edges, limits=LIMITS)

    assert breach is not None
    assert breach.code == "graph_too_large"
    assert breach.extra == {
        "nodes": 1,
        "edges": 1,
        "max_nodes": 10,
        "max_edges": 20,
        "limit": "chars",
        "max_chars": 10_000,
    }


def test_a_value_nested_deeper_than_max_depth_is_graph_too_large():
    # The node is level 1, `data` level 2 and `parameters` level 3: `_nested(n)` puts its leaf at n + 3.
    deep = [_node("a", parameters=_nested(MAX_VALUE_DEPTH - 2))]
    fits = [_node("a", parameters=_nested(MAX_VALUE_DEPTH - 3))]

    breach = graph_limit_breach(nodes=deep, edges=[], limits=LIMITS)

    assert breach is not None
    assert breach.code == "graph_too_large"
    assert breach.extra["limit"] == "depth"
    assert breach.extra["max_depth"] == MAX_VALUE_DEPTH
    assert graph_limit_breach(nodes=fits, edges=[], limits=LIMITS) is None


def test_a_deep_edge_is_refused_like_a_deep_node():
    edges = [{"id": "e", "source": "a", "target": "b", "data": _nested(MAX_VALUE_DEPTH)}]

    breach = graph_limit_breach(nodes=[], edges=edges, limits=LIMITS)

    assert breach is not None
    assert breach.extra["limit"] == "depth"


def test_parameters_larger_than_the_node_cap_are_parameters_too_large_naming_the_node():
    limits = GraphLimits(max_nodes=10, max_edges=20, max_chars=10 * MAX_NODE_PARAMETERS_CHARS)
    nodes = [
        _node("small", parameters={"system_prompt": "x" * 1_000}),
        _node("big", parameters={"system_prompt": "x" * MAX_NODE_PARAMETERS_CHARS}),
    ]

    breach = graph_limit_breach(nodes=nodes, edges=[], limits=limits)

    assert breach == LimitBreach(
        "parameters_too_large",
        f"Node 'big' has parameters larger than {MAX_NODE_PARAMETERS_CHARS} characters.",
        {"node_id": "big", "max_chars": MAX_NODE_PARAMETERS_CHARS},
    )


def test_parameters_just_under_the_node_cap_pass():
    limits = GraphLimits(max_nodes=10, max_edges=20, max_chars=10 * MAX_NODE_PARAMETERS_CHARS)
    # 1 for the object, 13 for the key, 1 for the string value, plus the string's characters.
    prompt = "x" * (MAX_NODE_PARAMETERS_CHARS - 15)
    nodes = [_node("a", parameters={"system_prompt": prompt})]

    assert graph_limit_breach(nodes=nodes, edges=[], limits=limits) is None
    nodes[0]["data"]["parameters"]["system_prompt"] += "x"
    breach = graph_limit_breach(nodes=nodes, edges=[], limits=limits)
    assert breach is not None
    assert breach.code == "parameters_too_large"


def test_a_long_node_id_is_quoted_cut_short():
    limits = GraphLimits(max_nodes=10, max_edges=20, max_chars=10 * MAX_NODE_PARAMETERS_CHARS)
    nodes = [_node("n" * 1_000, parameters={"system_prompt": "x" * MAX_NODE_PARAMETERS_CHARS})]

    breach = graph_limit_breach(nodes=nodes, edges=[], limits=limits)

    assert breach is not None
    assert breach.extra["node_id"] == "n" * 255


def test_non_object_nodes_and_edges_count_towards_the_size():
    nodes = ["x" * 9_000]
    edges = [["y" * 2_000]]

    breach = graph_limit_breach(nodes=nodes, edges=edges, limits=LIMITS)

    assert breach is not None
    assert breach.extra["limit"] == "chars"
