import pytest

from graphs.normalize import GraphShapeError, normalize_workflow_graph
from graphs.validate import CONTEXT_TOPOLOGY_CODES, validate_workflow


def _node(node_id, node_type, **parameters):
    node = {"id": node_id, "type": node_type, "position": {"x": 0, "y": 0}, "data": {}}
    if parameters:
        node["data"]["parameters"] = parameters
    return node


def _edge(edge_id, source, target, source_handle, target_handle):
    return {
        "id": edge_id,
        "source": source,
        "target": target,
        "sourceHandle": source_handle,
        "targetHandle": target_handle,
    }


def _graph(nodes, edges=()):
    return {"graphVersion": 2, "nodes": list(nodes), "edges": list(edges)}


def _codes(issues):
    return [(issue["code"], issue["node_id"]) for issue in issues]


def _valid_team():
    return _graph(
        [
            _node("t", "chatTrigger"),
            _node("lead", "teamLead", provider="offline", temperature=0.2),
            _node("mate", "aiAgent", model="demo"),
            _node("ctx-lead", "context"),
            _node("ctx-mate", "context"),
            _node("mem", "simpleMemory", reset_policy="preserve"),
        ],
        [
            _edge("e1", "t", "lead", "output-main", "input-main"),
            _edge("e2", "ctx-lead", "lead", "output-context", "input-context"),
            _edge("e3", "ctx-mate", "mate", "output-context", "input-context"),
            _edge("e4", "mate", "lead", "output-top", "input-teammates"),
            _edge("e5", "mem", "lead", "output-tool", "input-tools"),
            _edge("e6", "mem", "mate", "output-tool", "input-tools"),
        ],
    )


def test_a_well_formed_team_is_valid():
    assert validate_workflow(_valid_team()) == {"errors": [], "warnings": []}


def test_an_agent_without_a_context_is_valid():
    graph = _graph(
        [_node("t", "chatTrigger"), _node("a", "aiAgent")],
        [_edge("e", "t", "a", "output-main", "input-main")],
    )

    assert validate_workflow(graph) == {"errors": [], "warnings": []}
    assert validate_workflow(graph, context_only=True) == {"errors": [], "warnings": []}


def test_an_orphan_context_is_valid():
    assert validate_workflow(_graph([_node("c", "context")])) == {"errors": [], "warnings": []}


def test_dangling_edge_reports_each_bad_end():
    graph = _graph([_node("a", "aiAgent")], [_edge("e", "ghost", "gone", "output-main", "input-main")])

    errors = validate_workflow(graph)["errors"]

    assert errors == [
        {
            "code": "dangling_edge",
            "node_id": None,
            "message": "Edge source 'ghost' does not match any node",
            "edge_id": "e",
            "end": "source",
        },
        {
            "code": "dangling_edge",
            "node_id": None,
            "message": "Edge target 'gone' does not match any node",
            "edge_id": "e",
            "end": "target",
        },
    ]


def test_unknown_node_type_is_reported_on_the_node_and_its_ports_are_not_judged():
    graph = _graph(
        [_node("x", "quantumAgent"), _node("y", ""), _node("t", "chatTrigger")],
        [_edge("e", "t", "x", "output-main", "input-anything")],
    )

    errors = validate_workflow(graph)["errors"]

    assert errors == [
        {
            "code": "unknown_node_type",
            "node_id": "x",
            "message": "Node type 'quantumAgent' is not installed",
            "node_type": "quantumAgent",
        },
        {
            "code": "unknown_node_type",
            "node_id": "y",
            "message": "Node type '' is not installed",
            "node_type": "",
        },
    ]


def test_unknown_port_on_either_end():
    graph = _graph(
        [_node("t", "chatTrigger"), _node("a", "aiAgent")],
        [_edge("e", "t", "a", "output-bogus", "input-bogus")],
    )

    errors = validate_workflow(graph)["errors"]

    assert _codes(errors) == [("unknown_port", "t"), ("unknown_port", "a")]
    assert errors[0]["handle"] == "output-bogus"
    assert errors[0]["edge_id"] == "e"
    assert errors[1]["handle"] == "input-bogus"
    assert errors[1]["node_type"] == "aiAgent"


def test_port_with_the_wrong_direction_is_unknown():
    graph = _graph(
        [_node("a", "aiAgent"), _node("b", "aiAgent")],
        [_edge("e", "a", "b", "input-main", "output-main")],
    )

    assert _codes(validate_workflow(graph)["errors"]) == [("unknown_port", "a"), ("unknown_port", "b")]


def test_edges_without_handles_use_default_ports():
    graph = _graph(
        [_node("t", "chatTrigger"), _node("a", "aiAgent")], [{"id": "e", "source": "t", "target": "a"}]
    )

    assert validate_workflow(graph) == {"errors": [], "warnings": []}


def test_snake_case_handles_are_read():
    graph = _graph(
        [_node("t", "chatTrigger"), _node("a", "aiAgent")],
        [
            {
                "id": "e",
                "source": "t",
                "target": "a",
                "source_handle": "output-main",
                "target_handle": "input-nope",
            }
        ],
    )

    assert _codes(validate_workflow(graph)["errors"]) == [("unknown_port", "a")]


def test_legacy_memory_edge_is_a_warning_on_the_target_not_an_unknown_port():
    graph = _graph(
        [_node("m", "simpleMemory"), _node("a", "aiAgent")],
        [_edge("e", "m", "a", "output-tool", "input-memory")],
    )

    report = validate_workflow(graph)

    assert report["errors"] == []
    assert _codes(report["warnings"]) == [("legacy_memory_edge", "a")]
    assert report["warnings"][0]["edge_id"] == "e"


def test_input_memory_from_a_non_memory_node_is_an_unknown_port():
    graph = _graph(
        [_node("t", "chatTrigger"), _node("a", "aiAgent")],
        [_edge("e", "t", "a", "output-main", "input-memory")],
    )

    report = validate_workflow(graph)

    assert _codes(report["errors"]) == [("unknown_port", "a")]
    assert report["warnings"] == []


@pytest.mark.parametrize(
    ("nodes", "edge", "node_id"),
    [
        # a Context into a node that does not declare requiresContext
        (
            [_node("c", "context"), _node("m", "simpleMemory")],
            ("c", "m", "output-context", "input-context"),
            "m",
        ),
        (
            [_node("c", "context"), _node("t", "chatTrigger")],
            ("c", "t", "output-context", "input-context"),
            "t",
        ),
        # a Context on the wrong handles
        ([_node("c", "context"), _node("a", "aiAgent")], ("c", "a", "output-context", "input-main"), "a"),
        ([_node("c", "context"), _node("a", "aiAgent")], ("c", "a", "output-main", "input-context"), "a"),
        # something that is not a Context on the context handles
        ([_node("b", "aiAgent"), _node("a", "aiAgent")], ("b", "a", "output-main", "input-context"), "a"),
        ([_node("b", "aiAgent"), _node("a", "aiAgent")], ("b", "a", "output-context", "input-main"), "a"),
        # a Context into a node whose type is unknown
        ([_node("c", "context"), _node("x", "mystery")], ("c", "x", "output-context", "input-context"), "x"),
        # target missing: the source is highlighted
        ([_node("c", "context")], ("c", "gone", "output-context", "input-context"), "c"),
    ],
)
def test_invalid_context_edge(nodes, edge, node_id):
    graph = _graph(nodes, [_edge("ce", *edge)])

    errors = validate_workflow(graph, context_only=True)["errors"]

    assert errors == [
        {
            "code": "invalid_context_edge",
            "node_id": node_id,
            "message": "Context edges must connect context.output-context to a node declaring requiresContext "
            "at input-context",
            "edge_id": "ce",
        }
    ]
    assert "invalid_context_edge" in {issue["code"] for issue in validate_workflow(graph)["errors"]}


def test_multiple_contexts_on_one_agent():
    graph = _graph(
        [_node("a", "aiAgent"), _node("c2", "context"), _node("c1", "context")],
        [
            _edge("e1", "c2", "a", "output-context", "input-context"),
            _edge("e2", "c1", "a", "output-context", "input-context"),
        ],
    )

    errors = validate_workflow(graph)["errors"]

    assert errors == [
        {
            "code": "multiple_contexts",
            "node_id": "a",
            "message": "An agent cannot be connected to multiple Context nodes",
            "contexts": ["c1", "c2"],
        }
    ]


def test_the_same_context_wired_twice_to_one_agent_is_not_multiple():
    graph = _graph(
        [_node("a", "aiAgent"), _node("c", "context")],
        [
            _edge("e1", "c", "a", "output-context", "input-context"),
            _edge("e2", "c", "a", "output-context", "input-context"),
        ],
    )

    assert validate_workflow(graph)["errors"] == []


def test_shared_context_between_two_agents():
    graph = _graph(
        [_node("b", "aiAgent"), _node("a", "teamLead"), _node("c", "context")],
        [
            _edge("e1", "c", "b", "output-context", "input-context"),
            _edge("e2", "c", "a", "output-context", "input-context"),
        ],
    )

    errors = validate_workflow(graph)["errors"]

    assert errors == [
        {
            "code": "shared_context",
            "node_id": "c",
            "message": "A Context node cannot serve multiple agents",
            "agents": ["a", "b"],
        }
    ]


@pytest.mark.parametrize(
    ("nodes", "edge", "node_id", "message"),
    [
        (
            [_node("m", "aiAgent"), _node("l", "teamLead")],
            ("m", "l", "output-top", "input-team"),
            "l",
            "Unsupported teammate handle 'input-team'; use 'input-teammates'",
        ),
        (
            [_node("m", "aiAgent"), _node("a", "aiAgent")],
            ("m", "a", "output-top", "input-teammates"),
            "a",
            "The input-teammates handle is only valid on nodes that accept teammates",
        ),
        (
            [_node("mem", "simpleMemory"), _node("l", "teamLead")],
            ("mem", "l", "output-tool", "input-teammates"),
            "mem",
            "Node type 'simpleMemory' cannot be connected as a teammate",
        ),
        (
            [_node("x", "mystery"), _node("l", "teamLead")],
            ("x", "l", "output-main", "input-teammates"),
            "x",
            "Node type 'mystery' cannot be connected as a teammate",
        ),
    ],
)
def test_invalid_team_edge(nodes, edge, node_id, message):
    graph = _graph(nodes, [_edge("te", *edge)])

    errors = [e for e in validate_workflow(graph)["errors"] if e["code"] != "unknown_node_type"]

    assert errors == [{"code": "invalid_team_edge", "node_id": node_id, "message": message, "edge_id": "te"}]


def test_cycle_lists_the_unresolved_nodes_sorted():
    graph = _graph(
        [_node("t", "chatTrigger"), _node("b", "teamLead"), _node("a", "teamLead")],
        [
            _edge("e1", "t", "a", "output-main", "input-main"),
            _edge("e2", "a", "b", "output-main", "input-teammates"),
            _edge("e3", "b", "a", "output-main", "input-teammates"),
        ],
    )

    errors = validate_workflow(graph)["errors"]

    assert errors == [
        {
            "code": "cycle",
            "node_id": None,
            "message": "Cycle detected involving nodes: ['a', 'b']",
            "nodes": ["a", "b"],
        }
    ]


def test_self_loop_is_a_cycle():
    graph = _graph([_node("a", "teamLead")], [_edge("e", "a", "a", "output-main", "input-teammates")])

    assert _codes(validate_workflow(graph)["errors"]) == [("cycle", None)]


def test_invalid_param_is_an_error_with_path_and_type():
    graph = _graph([_node("a", "aiAgent", temperature=3), _node("m", "simpleMemory", reset_policy="wipe")])

    errors = validate_workflow(graph)["errors"]

    assert _codes(errors) == [("invalid_param", "a"), ("invalid_param", "m")]
    assert (errors[0]["path"], errors[0]["node_type"]) == ("temperature", "aiAgent")
    assert (errors[1]["path"], errors[1]["node_type"]) == ("reset_policy", "simpleMemory")


def test_unknown_parameter_is_invalid_and_points_at_the_key():
    graph = _graph([_node("c", "context", compaction_mode="auto")])

    errors = validate_workflow(graph)["errors"]

    assert _codes(errors) == [("invalid_param", "c")]
    assert errors[0]["path"] == "compaction_mode"


def test_non_object_parameters_are_invalid():
    graph = _graph([{"id": "a", "type": "aiAgent", "data": {"parameters": ["x"]}}])

    errors = validate_workflow(graph)["errors"]

    assert _codes(errors) == [("invalid_param", "a")]
    assert errors[0]["path"] == ""


def test_duplicate_node_id():
    graph = _graph([_node("a", "aiAgent"), _node("a", "aiAgent"), _node("a", "context")])

    errors = validate_workflow(graph)["errors"]

    assert errors == [
        {"code": "duplicate_node_id", "node_id": "a", "message": "Node id 'a' is used by 3 nodes", "count": 3}
    ]


def test_context_only_returns_only_topology_codes_and_no_warnings():
    graph = _graph(
        [
            _node("a", "aiAgent", temperature=9),
            _node("b", "aiAgent"),
            _node("c", "context"),
            _node("m", "simpleMemory"),
            _node("x", "mystery"),
        ],
        [
            _edge("e1", "c", "a", "output-context", "input-context"),
            _edge("e2", "c", "b", "output-context", "input-context"),
            _edge("e3", "m", "a", "output-tool", "input-memory"),
            _edge("e4", "a", "b", "output-main", "input-main"),
            _edge("e5", "b", "a", "output-main", "input-main"),
            _edge("e6", "a", "ghost", "output-main", "input-main"),
        ],
    )

    report = validate_workflow(graph, context_only=True)

    assert _codes(report["errors"]) == [("shared_context", "c")]
    assert report["warnings"] == []
    full = validate_workflow(graph)
    assert {e["code"] for e in full["errors"]} == {
        "dangling_edge",
        "shared_context",
        "unknown_node_type",
        "unsupported_connection",
        "invalid_param",
        "cycle",
    }
    assert _codes(full["warnings"]) == [("legacy_memory_edge", "a")]


def test_context_topology_codes_constant():
    assert (
        frozenset({"invalid_context_edge", "multiple_contexts", "shared_context"}) == CONTEXT_TOPOLOGY_CODES
    )


def test_garbage_entries_are_skipped():
    graph = {"nodes": [None, 3, _node("a", "aiAgent")], "edges": ["x", None]}

    assert validate_workflow(graph) == {"errors": [], "warnings": []}


def test_bad_shape_raises():
    with pytest.raises(GraphShapeError):
        validate_workflow([])
    with pytest.raises(GraphShapeError):
        validate_workflow({"nodes": {}, "edges": []})


def test_normalized_legacy_graph_validates_clean():
    graph = _graph(
        [
            _node("m", "simpleMemory", memory_content="# notes"),
            _node("a", "aiAgent"),
            _node("b", "aiAgent"),
        ],
        [
            _edge("l1", "m", "a", "output-tool", "input-memory"),
            _edge("l2", "m", "b", "output-tool", "input-memory"),
        ],
    )

    result = normalize_workflow_graph("12", graph)

    assert validate_workflow(result.graph) == {"errors": [], "warnings": []}


@pytest.mark.parametrize(
    ("nodes", "edge", "node_id", "message"),
    [
        (
            [_node("m", "simpleMemory"), _node("a", "aiAgent")],
            ("m", "a", "output-tool", "input-skill"),
            "a",
            "The 'Skills' port (input-skill) of 'aiAgent' has no behaviour yet; remove this connection",
        ),
        (
            [_node("t", "chatTrigger"), _node("a", "teamLead")],
            ("t", "a", "output-main", "input-task"),
            "a",
            "The 'Task' port (input-task) of 'teamLead' has no behaviour yet; remove this connection",
        ),
        (
            [_node("t", "chatTrigger"), _node("a", "aiAgent")],
            ("t", "a", "output-main", "input-tools"),
            "a",
            "A 'chatTrigger' output cannot feed the 'Tools' port (input-tools) of 'aiAgent'",
        ),
        (
            [_node("b", "aiAgent"), _node("a", "aiAgent")],
            ("b", "a", "output-top", "input-tools"),
            "a",
            "A 'aiAgent' output cannot feed the 'Tools' port (input-tools) of 'aiAgent'",
        ),
        (
            [_node("m", "simpleMemory"), _node("a", "aiAgent")],
            ("m", "a", "output-tool", "input-main"),
            "a",
            "A 'simpleMemory' output cannot feed the 'Input' port (input-main) of 'aiAgent'",
        ),
        (
            [_node("b", "aiAgent"), _node("a", "aiAgent")],
            ("b", "a", "output-main", "input-main"),
            "a",
            "An agent's output does not start another agent; wire the other agent as a teammate "
            "(input-teammates) of a team lead",
        ),
        (
            [_node("t", "chatTrigger"), _node("m", "simpleMemory")],
            ("t", "m", "output-main", None),
            "m",
            "'simpleMemory' has no input to connect to",
        ),
    ],
)
def test_a_wire_the_runtime_would_ignore_is_an_unsupported_connection(nodes, edge, node_id, message):
    graph = _graph(nodes, [_edge("ue", *edge)])

    report = validate_workflow(graph)

    assert report["errors"] == [
        {
            "code": "unsupported_connection",
            "node_id": node_id,
            "message": message,
            "edge_id": "ue",
            "handle": edge[3],
        }
    ]
    assert validate_workflow(graph, context_only=True)["errors"] == []


def test_the_node_specs_say_which_ports_have_no_behaviour():
    from graphs.specs import node_specs_payload

    agent = next(spec for spec in node_specs_payload()["specs"] if spec["type"] == "aiAgent")

    unsupported = sorted(h["name"] for h in agent["handles"] if h.get("supported") is False)
    assert unsupported == ["input-skill", "input-task"]
