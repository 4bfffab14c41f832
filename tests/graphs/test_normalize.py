import copy
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphs.normalize import (
    NORMALIZATION_VERSION,
    GraphShapeError,
    NormalizationResult,
    canonicalize_ids,
    normalize_workflow_graph,
    sanitize_type_for_id,
)
from graphs.validate import validate_workflow


def _node(node_id, node_type, x=0, y=0, **data):
    return {"id": node_id, "type": node_type, "position": {"x": x, "y": y}, "data": data}


def _edge(edge_id, source, target, source_handle=None, target_handle=None):
    edge = {"id": edge_id, "source": source, "target": target}
    if source_handle is not None:
        edge["sourceHandle"] = source_handle
    if target_handle is not None:
        edge["targetHandle"] = target_handle
    return edge


def _ids(graph):
    return [node["id"] for node in graph["nodes"]]


def _assert_fixed_point(workflow_id, result):
    again = normalize_workflow_graph(workflow_id, result.graph)
    assert again.graph == result.graph
    assert again.aliases == {}
    assert again.warnings == []
    assert again.artifacts == []


# --- canonical ids --------------------------------------------------------------------------------------


def test_version_constant():
    assert NORMALIZATION_VERSION == 1


@pytest.mark.parametrize(
    ("node_type", "segment"),
    [("aiAgent", "aiAgent"), ("my agent/v2", "my-agent-v2"), ("--x--", "x"), ("", "node"), ("::", "node")],
)
def test_type_segment_is_sanitized(node_type, segment):
    assert sanitize_type_for_id(node_type) == segment


def test_canonicalize_numbers_per_type_in_list_order():
    nodes = [_node("t", "chatTrigger"), _node("a", "aiAgent"), _node("b", "aiAgent"), _node("c", "context")]
    edges = [_edge("e1", "t", "a"), _edge("e2", "c", "b", "output-context", "input-context")]

    out_nodes, out_edges, aliases = canonicalize_ids("42", nodes, edges)

    assert [n["id"] for n in out_nodes] == [
        "42:chatTrigger:1",
        "42:aiAgent:1",
        "42:aiAgent:2",
        "42:context:1",
    ]
    assert aliases == {"t": "42:chatTrigger:1", "a": "42:aiAgent:1", "b": "42:aiAgent:2", "c": "42:context:1"}
    assert [(e["id"], e["source"], e["target"]) for e in out_edges] == [
        ("e1", "42:chatTrigger:1", "42:aiAgent:1"),
        ("e2", "42:context:1", "42:aiAgent:2"),
    ]


def test_canonical_hazard_noncanonical_before_canonical_never_collides():
    nodes = [_node("a", "aiAgent"), _node("9:aiAgent:1", "aiAgent")]
    edges = [_edge("e1", "a", "9:aiAgent:1")]

    out_nodes, out_edges, aliases = canonicalize_ids("9", nodes, edges)

    assert [n["id"] for n in out_nodes] == ["9:aiAgent:2", "9:aiAgent:1"]
    assert aliases == {"a": "9:aiAgent:2"}
    assert (out_edges[0]["source"], out_edges[0]["target"]) == ("9:aiAgent:2", "9:aiAgent:1")


def test_canonical_ids_keep_their_ordinal_and_others_go_past_the_maximum():
    nodes = [
        _node("x", "aiAgent"),
        _node("9:aiAgent:5", "aiAgent"),
        _node("y", "aiAgent"),
        _node("z", "context"),
    ]

    out_nodes, _, aliases = canonicalize_ids("9", nodes, [])

    assert [n["id"] for n in out_nodes] == ["9:aiAgent:6", "9:aiAgent:5", "9:aiAgent:7", "9:context:1"]
    assert aliases == {"x": "9:aiAgent:6", "y": "9:aiAgent:7", "z": "9:context:1"}


def test_ids_canonical_for_another_type_or_workflow_or_with_leading_zero_are_renamed():
    nodes = [
        _node("9:context:1", "aiAgent"),
        _node("7:aiAgent:1", "aiAgent"),
        _node("9:aiAgent:01", "aiAgent"),
    ]

    out_nodes, _, aliases = canonicalize_ids("9", nodes, [])

    assert [n["id"] for n in out_nodes] == ["9:aiAgent:1", "9:aiAgent:2", "9:aiAgent:3"]
    assert aliases == {
        "9:context:1": "9:aiAgent:1",
        "7:aiAgent:1": "9:aiAgent:2",
        "9:aiAgent:01": "9:aiAgent:3",
    }


def test_two_nodes_with_the_same_canonical_id_only_the_first_keeps_it():
    nodes = [_node("9:aiAgent:1", "aiAgent"), _node("9:aiAgent:1", "aiAgent")]
    edges = [_edge("e1", "9:aiAgent:1", "9:aiAgent:1")]

    out_nodes, out_edges, aliases = canonicalize_ids("9", nodes, edges)

    assert [n["id"] for n in out_nodes] == ["9:aiAgent:1", "9:aiAgent:2"]
    assert aliases == {}
    assert (out_edges[0]["source"], out_edges[0]["target"]) == ("9:aiAgent:1", "9:aiAgent:1")


def test_duplicate_plain_ids_alias_to_the_first_node():
    nodes = [_node("a", "aiAgent"), _node("a", "aiAgent"), _node("t", "chatTrigger")]
    edges = [_edge("e1", "t", "a")]

    out_nodes, out_edges, aliases = canonicalize_ids("9", nodes, edges)

    assert [n["id"] for n in out_nodes] == ["9:aiAgent:1", "9:aiAgent:2", "9:chatTrigger:1"]
    assert aliases == {"a": "9:aiAgent:1", "t": "9:chatTrigger:1"}
    assert out_edges[0]["target"] == "9:aiAgent:1"


def test_agent_node_id_reference_follows_the_alias():
    nodes = [_node("agent", "aiAgent"), _node("ctx", "context", agentNodeId="agent", systemManaged=True)]

    out_nodes, _, _ = canonicalize_ids("3", nodes, [])

    assert out_nodes[1]["data"] == {"agentNodeId": "3:aiAgent:1", "systemManaged": True}


def test_canonicalize_does_not_mutate_its_inputs_and_keeps_edge_ids():
    nodes = [_node("a", "aiAgent", agentNodeId="a"), _node("b", "aiAgent")]
    edges = [
        _edge("edge-a-b", "a", "b"),
        {"id": "", "source": "a", "target": "b", "targetHandle": "input-main"},
    ]
    before = copy.deepcopy((nodes, edges))

    _, out_edges, _ = canonicalize_ids("9", nodes, edges)

    assert (nodes, edges) == before
    assert [e["id"] for e in out_edges] == ["edge-a-b", "e-9:aiAgent:1--9:aiAgent:2-input-main"]


def test_missing_and_duplicate_edge_ids_get_fresh_deterministic_ids():
    nodes = [_node("9:aiAgent:1", "aiAgent"), _node("9:aiAgent:2", "aiAgent")]
    edges = [
        _edge("x", "9:aiAgent:1", "9:aiAgent:2", "output-main", "input-main"),
        _edge("x", "9:aiAgent:1", "9:aiAgent:2", "output-main", "input-main"),
        _edge(None, "9:aiAgent:1", "9:aiAgent:2", "output-main", "input-main"),
        _edge("e-9:aiAgent:1-output-main-9:aiAgent:2-input-main-2", "9:aiAgent:2", "9:aiAgent:1"),
    ]

    _, out_edges, _ = canonicalize_ids("9", nodes, edges)

    assert [e["id"] for e in out_edges] == [
        "x",
        "e-9:aiAgent:1-output-main-9:aiAgent:2-input-main",
        "e-9:aiAgent:1-output-main-9:aiAgent:2-input-main-3",
        "e-9:aiAgent:1-output-main-9:aiAgent:2-input-main-2",
    ]


def test_canonicalize_requires_a_workflow_id():
    with pytest.raises(ValueError, match="workflow_id"):
        canonicalize_ids("", [], [])


# --- shape ----------------------------------------------------------------------------------------------


def test_shape_keeps_only_allowlisted_keys_and_converts_snake_handles():
    graph = {
        "graphVersion": 1,
        "owner_id": "mallory",
        "viewport": {"zoom": 2},
        "nodes": [
            {
                "id": "a",
                "type": "aiAgent",
                "position": {"x": 10, "y": 2.5, "z": 9},
                "selected": True,
                "width": 300,
                "data": {
                    "label": "Agent",
                    "disabled": False,
                    "condition": {"op": "eq"},
                    "parameters": {"model": "m", "api_key": "sk-secret", "max_output_tokens": 10},
                    "agentNodeId": "b",
                    "token_usage": 1,
                },
            },
            {
                "id": "c",
                "type": "context",
                "data": {"label": "Context", "systemManaged": True, "agentNodeId": "a", "journal": []},
            },
        ],
        "edges": [
            {
                "id": "e1",
                "source": "c",
                "target": "a",
                "source_handle": "output-context",
                "target_handle": "ignored",
                "targetHandle": "input-context",
                "animated": True,
                "style": {"stroke": "red"},
                "data": {"label": "L", "condition": "x", "systemManaged": True, "payload": "secret"},
            }
        ],
    }

    result = normalize_workflow_graph("", graph)

    assert result.graph == {
        "graphVersion": 2,
        "nodes": [
            {
                "id": "a",
                "type": "aiAgent",
                "position": {"x": 10, "y": 2.5},
                "data": {
                    "label": "Agent",
                    "disabled": False,
                    "condition": {"op": "eq"},
                    "parameters": {"model": "m", "max_output_tokens": 10},
                },
            },
            {
                "id": "c",
                "type": "context",
                "position": {"x": 0, "y": 0},
                "data": {"label": "Context", "systemManaged": True, "agentNodeId": "a"},
            },
        ],
        "edges": [
            {
                "id": "e1",
                "source": "c",
                "target": "a",
                "sourceHandle": "output-context",
                "targetHandle": "input-context",
                "animated": True,
                "data": {"label": "L", "condition": "x", "systemManaged": True},
            }
        ],
    }
    assert result.aliases == {}
    assert result.warnings == []
    assert result.artifacts == []


def test_garbage_is_dropped_or_coerced_not_raised():
    graph = {
        "nodes": [
            "not a node",
            None,
            {"id": 5, "type": 7, "position": {"x": "1", "y": True}},
            {"type": "aiAgent", "position": [1, 2], "data": "x"},
        ],
        "edges": [3, {"id": 8, "source": 5, "target": None, "sourceHandle": 2}],
    }

    result = normalize_workflow_graph("", graph)

    assert result.graph["nodes"] == [
        {"id": "5", "type": "", "position": {"x": 0, "y": 0}, "data": {}},
        {"id": "", "type": "aiAgent", "position": {"x": 0, "y": 0}, "data": {}},
    ]
    assert result.graph["edges"] == [{"id": "8", "source": "5", "target": "", "sourceHandle": "2"}]


def test_missing_node_and_edge_lists_are_empty():
    assert normalize_workflow_graph("1", {}).graph == {"graphVersion": 2, "nodes": [], "edges": []}


@pytest.mark.parametrize(
    ("graph", "message"),
    [
        ([], "JSON object"),
        ("graph", "JSON object"),
        ({"nodes": {}, "edges": []}, "graph.nodes must be a list"),
        ({"nodes": [], "edges": "x"}, "graph.edges must be a list"),
    ],
)
def test_bad_shape_raises_graph_shape_error(graph, message):
    with pytest.raises(GraphShapeError, match=message):
        normalize_workflow_graph("1", graph)


def test_graph_shape_error_is_a_value_error():
    assert issubclass(GraphShapeError, ValueError)


def test_normalize_does_not_mutate_its_input():
    graph = {
        "nodes": [
            _node("m", "simpleMemory", parameters={"memory_content": "# notes", "reset_policy": "clear"}),
            _node("a", "aiAgent", parameters={"model": "m"}),
        ],
        "edges": [_edge("e", "m", "a", "output-tool", "input-memory")],
    }
    before = copy.deepcopy(graph)

    result = normalize_workflow_graph("9", graph)

    assert graph == before
    result.graph["nodes"][1]["data"]["parameters"]["model"] = "changed"
    assert graph == before


# --- legacy rewrite -------------------------------------------------------------------------------------


def _worked_example():
    return {
        "nodes": [
            _node(
                "memory",
                "simpleMemory",
                parameters={"memory_content": "## Human\nhello", "last_session_id": "uuid-1"},
            ),
            _node("first", "aiAgent", x=400, y=20),
            _node("second", "aiAgent", x=800, y=30),
        ],
        "edges": [
            _edge("legacy-1", "memory", "first", "output-memory", "input-memory"),
            {"id": "legacy-2", "source": "memory", "target": "second", "target_handle": "input-memory"},
        ],
    }


def test_worked_example_legacy_memory_is_rewritten():
    result = normalize_workflow_graph("42", _worked_example())

    assert result.graph["nodes"] == [
        {
            "id": "42:simpleMemory:1",
            "type": "simpleMemory",
            "position": {"x": 0, "y": 0},
            "data": {"parameters": {}},
        },
        {"id": "42:aiAgent:1", "type": "aiAgent", "position": {"x": 400, "y": 20}, "data": {}},
        {"id": "42:aiAgent:2", "type": "aiAgent", "position": {"x": 800, "y": 30}, "data": {}},
        {
            "id": "42:context:1",
            "type": "context",
            "position": {"x": 40, "y": 20},
            "data": {"label": "Context"},
        },
        {
            "id": "42:context:2",
            "type": "context",
            "position": {"x": 440, "y": 30},
            "data": {"label": "Context"},
        },
    ]
    assert result.graph["edges"] == [
        {
            "id": "memory-tool-memory-first",
            "source": "42:simpleMemory:1",
            "target": "42:aiAgent:1",
            "sourceHandle": "output-tool",
            "targetHandle": "input-tools",
        },
        {
            "id": "context-__context__-1-first-first",
            "source": "42:context:1",
            "target": "42:aiAgent:1",
            "sourceHandle": "output-context",
            "targetHandle": "input-context",
        },
        {
            "id": "memory-tool-memory-second",
            "source": "42:simpleMemory:1",
            "target": "42:aiAgent:2",
            "sourceHandle": "output-tool",
            "targetHandle": "input-tools",
        },
        {
            "id": "context-__context__-2-second-second",
            "source": "42:context:2",
            "target": "42:aiAgent:2",
            "sourceHandle": "output-context",
            "targetHandle": "input-context",
        },
    ]
    assert result.aliases == {
        "memory": "42:simpleMemory:1",
        "first": "42:aiAgent:1",
        "second": "42:aiAgent:2",
        "__context__:1:first": "42:context:1",
        "__context__:2:second": "42:context:2",
    }
    assert result.artifacts == [
        {
            "kind": "legacy_partial",
            "memory_node_id": "42:simpleMemory:1",
            "agent_node_id": "42:aiAgent:1",
            "context_node_id": "42:context:1",
            "markdown": "## Human\nhello",
        },
        {
            "kind": "legacy_partial",
            "memory_node_id": "42:simpleMemory:1",
            "agent_node_id": "42:aiAgent:2",
            "context_node_id": "42:context:2",
            "markdown": "## Human\nhello",
        },
    ]
    assert result.warnings == [
        {
            "code": "legacy_memory_migrated",
            "node_id": "42:aiAgent:1",
            "message": "Migrated legacy Simple Memory edge '42:simpleMemory:1' -> '42:aiAgent:1'; "
            "process-local vector entries could not be recovered",
        },
        {
            "code": "legacy_memory_migrated",
            "node_id": "42:aiAgent:2",
            "message": "Migrated legacy Simple Memory edge '42:simpleMemory:1' -> '42:aiAgent:2'; "
            "process-local vector entries could not be recovered",
        },
    ]
    assert "hello" not in repr(result.graph)
    _assert_fixed_point("42", result)


def test_to_dict_carries_all_four_parts():
    result = normalize_workflow_graph("42", _worked_example())

    assert isinstance(result, NormalizationResult)
    assert result.to_dict() == {
        "graph": result.graph,
        "aliases": result.aliases,
        "warnings": result.warnings,
        "artifacts": result.artifacts,
    }


def test_legacy_rewrite_without_workflow_id_keeps_temporary_context_ids():
    result = normalize_workflow_graph("", _worked_example())

    assert _ids(result.graph) == ["memory", "first", "second", "__context__:1:first", "__context__:2:second"]
    assert result.aliases == {}
    assert [a["context_node_id"] for a in result.artifacts] == ["__context__:1:first", "__context__:2:second"]
    _assert_fixed_point("", result)


def test_legacy_rewrite_reuses_the_agents_existing_context_and_tool_edge():
    graph = {
        "nodes": [
            _node("mem", "simpleMemory", parameters={"reset_policy": "clear"}),
            _node("agent", "aiAgent", x=500),
            _node("ctx", "context"),
        ],
        "edges": [
            _edge("ctx-edge", "ctx", "agent", "output-context", "input-context"),
            _edge("tool-edge", "mem", "agent", "output-tool", "input-tools"),
            _edge("legacy", "mem", "agent", "output-tool", "input-memory"),
        ],
    }

    result = normalize_workflow_graph("5", graph)

    assert _ids(result.graph) == ["5:simpleMemory:1", "5:aiAgent:1", "5:context:1"]
    assert [(e["id"], e["source"], e["target"]) for e in result.graph["edges"]] == [
        ("ctx-edge", "5:context:1", "5:aiAgent:1"),
        ("tool-edge", "5:simpleMemory:1", "5:aiAgent:1"),
    ]
    assert result.graph["nodes"][0]["data"] == {"parameters": {"reset_policy": "clear"}}
    assert result.artifacts == []
    assert [w["node_id"] for w in result.warnings] == ["5:aiAgent:1"]


def test_legacy_rewrite_of_a_memory_shared_by_two_edges_to_one_agent_is_one_tool_edge():
    graph = {
        "nodes": [
            _node("mem", "simpleMemory", parameters={"memory_content": "notes"}),
            _node("a", "teamLead"),
        ],
        "edges": [
            _edge("l1", "mem", "a", None, "input-memory"),
            _edge("l2", "mem", "a", None, "input-memory"),
        ],
    }

    result = normalize_workflow_graph("5", graph)

    assert [(e["source"], e["targetHandle"]) for e in result.graph["edges"]] == [
        ("5:simpleMemory:1", "input-tools"),
        ("5:context:1", "input-context"),
    ]
    assert len(result.warnings) == 1
    assert len(result.artifacts) == 1


def test_legacy_edge_to_a_missing_target_or_from_a_non_memory_is_left_alone():
    graph = {
        "nodes": [_node("mem", "simpleMemory"), _node("t", "chatTrigger"), _node("a", "aiAgent")],
        "edges": [
            _edge("gone", "mem", "nowhere", None, "input-memory"),
            _edge("odd", "t", "a", None, "input-memory"),
        ],
    }

    result = normalize_workflow_graph("", graph)

    assert [e["id"] for e in result.graph["edges"]] == ["gone", "odd"]
    assert _ids(result.graph) == ["mem", "t", "a"]
    assert result.warnings == []


def test_empty_memory_content_gives_a_warning_but_no_artifact():
    graph = {
        "nodes": [_node("mem", "simpleMemory", parameters={"memory_content": ""}), _node("a", "aiAgent")],
        "edges": [_edge("l", "mem", "a", None, "input-memory")],
    }

    result = normalize_workflow_graph("1", graph)

    assert result.artifacts == []
    assert [w["code"] for w in result.warnings] == ["legacy_memory_migrated"]


def test_temporary_context_id_does_not_collide_with_an_existing_node():
    graph = {
        "nodes": [
            _node("mem", "simpleMemory"),
            _node("a", "aiAgent"),
            _node("__context__:1:a", "chatTrigger"),
        ],
        "edges": [_edge("l", "mem", "a", None, "input-memory")],
    }

    result = normalize_workflow_graph("", graph)

    assert _ids(result.graph) == ["mem", "a", "__context__:1:a", "__context__:1:a:2"]


def test_agents_without_legacy_edges_get_no_context_and_orphan_contexts_survive():
    graph = {
        "nodes": [
            _node("t", "chatTrigger"),
            _node("a", "aiAgent"),
            _node("orphan", "context", agentNodeId="deleted-agent", systemManaged=True),
            _node("unwired", "context"),
        ],
        "edges": [_edge("e", "t", "a", "output-main", "input-main")],
    }

    result = normalize_workflow_graph("7", graph)

    assert _ids(result.graph) == ["7:chatTrigger:1", "7:aiAgent:1", "7:context:1", "7:context:2"]
    assert result.graph["nodes"][2]["data"] == {"agentNodeId": "deleted-agent", "systemManaged": True}
    assert len(result.graph["edges"]) == 1
    assert result.warnings == []


def test_hazard_through_the_pipeline():
    graph = {"nodes": [_node("a", "aiAgent"), _node("9:aiAgent:1", "aiAgent")], "edges": []}

    result = normalize_workflow_graph("9", graph)

    assert _ids(result.graph) == ["9:aiAgent:2", "9:aiAgent:1"]
    assert result.aliases == {"a": "9:aiAgent:2"}
    _assert_fixed_point("9", result)


# --- properties -----------------------------------------------------------------------------------------

_TYPES = ["chatTrigger", "aiAgent", "teamLead", "context", "simpleMemory", "weird type!", ""]
_HANDLES = [
    None,
    "output-main",
    "input-main",
    "output-tool",
    "input-tools",
    "output-context",
    "input-context",
    "input-memory",
    "input-teammates",
]
_NODE_IDS = st.one_of(
    st.sampled_from(["a", "b", "c", "d", "__context__:1:a"]),
    st.builds(lambda t, n: f"9:{sanitize_type_for_id(t)}:{n}", st.sampled_from(_TYPES), st.integers(1, 4)),
    st.sampled_from(["7:aiAgent:1", "9:aiAgent:0", "9:aiAgent:01", "", None]),
    st.integers(0, 3),
)


@st.composite
def _graphs(draw):
    nodes = []
    for _ in range(draw(st.integers(0, 10))):
        node = {"id": draw(_NODE_IDS), "type": draw(st.sampled_from(_TYPES))}
        if draw(st.booleans()):
            node["position"] = {"x": draw(st.integers(-1000, 1000)), "y": draw(st.floats(-1e3, 1e3))}
        if node["type"] == "simpleMemory" and draw(st.booleans()):
            node["data"] = {"parameters": {"memory_content": draw(st.text(max_size=5))}}
        nodes.append(node)
    linkable = [n["id"] for n in nodes if n["id"] not in (None, "")]
    memories = [n["id"] for n in nodes if n["type"] == "simpleMemory" and n["id"] not in (None, "")]
    edges = []
    if linkable:
        for _ in range(draw(st.integers(0, 14))):
            edge = {
                "id": draw(st.one_of(st.sampled_from(["e1", "e2", "", None]), st.text(max_size=3))),
                "source": draw(st.sampled_from(linkable)),
                "target": draw(st.sampled_from(linkable)),
            }
            handle_key = draw(st.sampled_from(["targetHandle", "target_handle"]))
            edge[handle_key] = draw(st.sampled_from(_HANDLES))
            edge["sourceHandle"] = draw(st.sampled_from(_HANDLES))
            edges.append(edge)
        if memories:
            edges += [
                {
                    "id": draw(st.sampled_from(["legacy", None])),
                    "source": draw(st.sampled_from(memories)),
                    "target": draw(st.sampled_from(linkable)),
                    "targetHandle": "input-memory",
                }
                for _ in range(draw(st.integers(0, 4)))
            ]
    return {"nodes": nodes, "edges": edges}


@settings(max_examples=250, deadline=None)
@given(graph=_graphs())
def test_property_normalized_graph_is_canonical_connected_and_a_fixed_point(graph):
    before = copy.deepcopy(graph)

    result = normalize_workflow_graph("9", graph)

    assert graph == before
    ids = _ids(result.graph)
    assert len(ids) == len(set(ids))
    for node in result.graph["nodes"]:
        pattern = rf"9:{re.escape(sanitize_type_for_id(node['type']))}:[1-9][0-9]*"
        assert re.fullmatch(pattern, node["id"])
    edge_ids = [edge["id"] for edge in result.graph["edges"]]
    assert all(edge_ids)
    assert len(edge_ids) == len(set(edge_ids))
    known = set(ids)
    for edge in result.graph["edges"]:
        assert edge["source"] in known
        assert edge["target"] in known
    types = {node["id"]: node["type"] for node in result.graph["nodes"]}
    assert not [
        e
        for e in result.graph["edges"]
        if types[e["source"]] == "simpleMemory" and e.get("targetHandle") == "input-memory"
    ]
    assert "memory_content" not in repr(result.graph)
    assert set(result.aliases.values()) <= known
    _assert_fixed_point("9", result)


@settings(max_examples=250, deadline=None)
@given(graph=_graphs())
def test_property_without_workflow_id_normalization_is_still_a_fixed_point(graph):
    result = normalize_workflow_graph("", graph)

    assert result.aliases == {}
    _assert_fixed_point("", result)


# --- scale: linear in nodes + edges ---------------------------------------------------------------------


def _many_edges(count, edge_id=None):
    edge = {"source": "t", "target": "a", "sourceHandle": "output-main", "targetHandle": "input-main"}
    if edge_id is not None:
        edge["id"] = edge_id
    return {
        "graphVersion": 2,
        "nodes": [_node("t", "chatTrigger"), _node("a", "aiAgent")],
        "edges": [dict(edge) for _ in range(count)],
    }


def _normalize_and_validate_timed(graph):
    """The fastest of three runs (a busy machine's scheduler should not decide a test about growth),
    with the result and report of the last one."""
    # Warm the spec registry and the compiled parameter checks, which every process pays once.
    validate_workflow(normalize_workflow_graph("9", _many_edges(2)).graph)
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        result = normalize_workflow_graph("9", graph)
        report = validate_workflow(result.graph)
        timings.append(time.perf_counter() - started)
    return min(timings), result, report


def test_twenty_thousand_edges_without_ids_normalize_and_validate_in_under_a_second():
    graph = _many_edges(20_000)

    elapsed, result, report = _normalize_and_validate_timed(graph)

    assert elapsed < 1.0
    base = "e-t-output-main-a-input-main"
    assert [e["id"] for e in result.graph["edges"]] == [base] + [f"{base}-{n}" for n in range(2, 20_001)]
    assert report == {"errors": [], "warnings": []}
    assert normalize_workflow_graph("9", result.graph).graph == result.graph


def test_twenty_thousand_edges_sharing_one_id_normalize_and_validate_in_under_a_second():
    graph = _many_edges(20_000, edge_id="shared")

    elapsed, result, report = _normalize_and_validate_timed(graph)

    assert elapsed < 1.0
    base = "e-t-output-main-a-input-main"
    assert [e["id"] for e in result.graph["edges"]] == ["shared", base] + [
        f"{base}-{n}" for n in range(2, 20_000)
    ]
    assert report == {"errors": [], "warnings": []}


def test_fresh_edge_ids_skip_every_suffix_already_taken():
    nodes = [_node("a", "aiAgent"), _node("b", "aiAgent")]
    base = "e-a-output-main-b-input-main"
    edges = [
        _edge(base, "a", "b", "output-main", "input-main"),
        _edge(f"{base}-3", "a", "b", "output-main", "input-main"),
        _edge(None, "a", "b", "output-main", "input-main"),
        _edge(None, "a", "b", "output-main", "input-main"),
        _edge(f"{base}-5", "a", "b", "output-main", "input-main"),
        _edge(None, "a", "b", "output-main", "input-main"),
    ]

    result = normalize_workflow_graph("", {"nodes": nodes, "edges": edges})

    assert [e["id"] for e in result.graph["edges"]] == [
        base,
        f"{base}-3",
        f"{base}-2",
        f"{base}-4",
        f"{base}-5",
        f"{base}-6",
    ]


def test_five_thousand_legacy_memories_into_one_agent_rewrite_in_under_a_second():
    memories = [_node(f"mem{i}", "simpleMemory") for i in range(5_000)]
    graph = {
        "nodes": [*memories, _node("a", "aiAgent")],
        "edges": [_edge(None, f"mem{i}", "a", "output-memory", "input-memory") for i in range(5_000)],
    }

    elapsed, result, report = _normalize_and_validate_timed(graph)

    assert elapsed < 1.0
    tool_edges = [e for e in result.graph["edges"] if e["targetHandle"] == "input-tools"]
    context_edges = [e for e in result.graph["edges"] if e["targetHandle"] == "input-context"]
    assert len(tool_edges) == 5_000
    assert len(context_edges) == 1
    assert len(result.warnings) == 5_000
    assert report == {"errors": [], "warnings": []}
