"""The graphs API: contract, authorization matrix, bad input, redaction."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from django.core.management import call_command

from graphs import services
from graphs.models import ContextArchiveOutbox, Deployment, Workflow
from opencompany.core.sanitize import blocked_keys_in
from tests.conftest import demo_graph, node_id

pytestmark = pytest.mark.django_db


def test_token_then_list_workflows(owner, workflow, anon_client):
    token = anon_client.post(
        "/api/v1/auth/token", {"username": "owner", "password": "owner-pass-123"}, format="json"
    )
    assert token.status_code == 200
    anon_client.credentials(HTTP_AUTHORIZATION=f"Token {token.json()['token']}")

    response = anon_client.get("/api/v1/workflows")

    assert response.status_code == 200
    body = response.json()
    assert [w["id"] for w in body["results"]] == [workflow.pk]
    assert body["results"][0]["generation"] == 1
    assert body["results"][0]["state"] == "live"
    assert (body["next_cursor"], body["has_more"]) == (None, False)


def test_wrong_password_is_401_with_a_code(owner, anon_client):
    response = anon_client.post(
        "/api/v1/auth/token", {"username": "owner", "password": "nope"}, format="json"
    )

    assert response.status_code == 401
    assert response.json()["code"] == "invalid_credentials"


def test_list_is_cursor_paginated(owner, api_client):
    from graphs import services

    for i in range(53):
        services.workflow_create(owner=owner, name=f"w{i}")

    first = api_client.get("/api/v1/workflows").json()
    second = api_client.get("/api/v1/workflows", {"cursor": first["next_cursor"]}).json()

    assert len(first["results"]) == 50
    assert len(second["results"]) == 3
    assert (second["next_cursor"], second["has_more"]) == (None, False)
    assert first["has_more"] is True
    ids = [w["id"] for w in first["results"] + second["results"]]
    assert len(set(ids)) == 53


def test_tampered_list_cursor_is_invalid_cursor(api_client):
    response = api_client.get("/api/v1/workflows", {"cursor": "abc"})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_cursor"


def test_create_get_save_roundtrip(api_client):
    created = api_client.post("/api/v1/workflows", {"name": "A", "graph": demo_graph()}, format="json")
    assert created.status_code == 201
    wf = created.json()
    assert wf["revision"] == 1
    assert wf["aliases"]["agent"] == f"{wf['id']}:aiAgent:1"
    assert wf["validation"] == {"errors": [], "warnings": []}
    assert wf["context_archives_pending"] == 0

    saved = api_client.put(
        f"/api/v1/workflows/{wf['id']}",
        {"name": "B", "graph": wf["graph"], "expected_revision": 1},
        format="json",
    )
    assert saved.status_code == 200
    assert (saved.json()["name"], saved.json()["revision"], saved.json()["aliases"]) == ("B", 2, {})

    stale = api_client.put(
        f"/api/v1/workflows/{wf['id']}", {"graph": wf["graph"], "expected_revision": 1}, format="json"
    )
    assert stale.status_code == 409
    assert stale.json() == {
        "code": "revision_conflict",
        "message": stale.json()["message"],
        "extra": {"current_revision": 2},
    }


def test_save_with_two_contexts_on_one_agent_is_400_and_changes_nothing(api_client, workflow):
    graph = copy.deepcopy(workflow.graph)
    agent = node_id(workflow, "aiAgent")
    graph["nodes"].append({"id": "extra-ctx", "type": "context", "position": {"x": 0, "y": 0}, "data": {}})
    graph["edges"].append(
        {
            "id": "x",
            "source": "extra-ctx",
            "sourceHandle": "output-context",
            "target": agent,
            "targetHandle": "input-context",
        }
    )

    response = api_client.put(
        f"/api/v1/workflows/{workflow.pk}",
        {"graph": graph, "expected_revision": workflow.revision},
        format="json",
    )

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_context_topology"
    assert [(e["code"], e["node_id"]) for e in body["extra"]["errors"]] == [("multiple_contexts", agent)]
    stored = Workflow.objects.get(pk=workflow.pk)
    assert stored.graph == workflow.graph
    assert stored.revision == workflow.revision


def test_validate_deploy_reset_export_import(api_client, workflow):
    validate = api_client.post(f"/api/v1/workflows/{workflow.pk}/validate", {}, format="json")
    assert validate.json() == {"errors": [], "warnings": []}

    reset = api_client.post(f"/api/v1/workflows/{workflow.pk}/reset")
    assert (reset.status_code, reset.json()["generation"], reset.json()["state"]) == (200, 1, "reset")
    deploy = api_client.post(f"/api/v1/workflows/{workflow.pk}/deploy")
    assert (deploy.status_code, deploy.json()["generation"], deploy.json()["state"]) == (200, 2, "live")

    export = api_client.get(f"/api/v1/workflows/{workflow.pk}/export")
    assert export.status_code == 200
    imported = api_client.post("/api/v1/workflows/import", export.json(), format="json")
    assert imported.status_code == 201
    new = imported.json()
    assert new["id"] != workflow.pk
    assert all(n["id"].startswith(f"{new['id']}:") for n in new["graph"]["nodes"])
    assert len(new["graph"]["nodes"]) == len(workflow.graph["nodes"])


def test_import_refuses_any_validation_error(api_client):
    graph = demo_graph()
    graph["nodes"].append({"id": "x", "type": "noSuchType", "position": {"x": 0, "y": 0}, "data": {}})

    response = api_client.post("/api/v1/workflows/import", {"name": "bad", "graph": graph}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert "unknown_node_type" in {e["code"] for e in response.json()["extra"]["errors"]}
    assert Workflow.objects.filter(name="bad").exists() is False


def test_node_specs(api_client):
    body = api_client.get("/api/v1/node-specs").json()

    assert len(body["hash"]) == 16
    types = {spec["type"] for spec in body["specs"]}
    assert {"chatTrigger", "aiAgent", "teamLead", "context", "simpleMemory"} <= types


def test_subagent_endpoint(api_client, owner):
    from graphs import services

    wf = services.workflow_create(
        owner=owner, name="t", graph={"nodes": [{"id": "lead", "type": "teamLead", "data": {}}], "edges": []}
    )
    lead = node_id(wf, "teamLead")

    response = api_client.post(
        f"/api/v1/workflows/{wf.pk}/agents/{lead}/subagents", {"label": "R"}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["context_node_id"] == node_id(wf, "context")


# --- authorization matrix ------------------------------------------------------------------------


def _graph_endpoints(wf: Any) -> list[tuple[str, str, dict[str, Any] | None]]:
    agent = node_id(wf, "aiAgent")
    return [
        ("get", f"/api/v1/workflows/{wf.pk}", None),
        ("put", f"/api/v1/workflows/{wf.pk}", {"graph": demo_graph(), "expected_revision": wf.revision}),
        ("delete", f"/api/v1/workflows/{wf.pk}", None),
        ("post", f"/api/v1/workflows/{wf.pk}/validate", {}),
        ("post", f"/api/v1/workflows/{wf.pk}/deploy", None),
        ("post", f"/api/v1/workflows/{wf.pk}/reset", None),
        ("get", f"/api/v1/workflows/{wf.pk}/export", None),
        ("post", f"/api/v1/workflows/{wf.pk}/agents/{agent}/subagents", {}),
    ]


def _snapshot() -> list[Any]:
    return [
        list(Workflow.objects.order_by("pk").values("pk", "name", "revision", "graph")),
        list(Deployment.objects.order_by("pk").values("pk", "state", "generation")),
        ContextArchiveOutbox.objects.count(),
    ]


def test_another_owner_gets_404_everywhere_and_changes_nothing(workflow, other_client):
    before = _snapshot()
    for method, url, body in _graph_endpoints(workflow):
        response = getattr(other_client, method)(url, body, format="json")
        assert (method, url, response.status_code, response.json()["code"]) == (method, url, 404, "not_found")
    assert _snapshot() == before
    assert other_client.get("/api/v1/workflows").json()["results"] == []


def test_a_missing_id_answers_exactly_like_a_foreign_one(workflow, api_client, other_client):
    foreign = other_client.get(f"/api/v1/workflows/{workflow.pk}")
    missing = api_client.get("/api/v1/workflows/wf_doesnotexist")

    assert (foreign.status_code, foreign.json()) == (missing.status_code, missing.json())


def test_unauthenticated_is_refused_everywhere(workflow, anon_client):
    urls = [
        ("get", "/api/v1/workflows", None),
        ("post", "/api/v1/workflows", {"name": "x"}),
        ("get", "/api/v1/node-specs", None),
    ]
    urls += _graph_endpoints(workflow)
    urls.append(("post", "/api/v1/workflows/import", {"name": "x", "graph": demo_graph()}))
    for method, url, body in urls:
        response = getattr(anon_client, method)(url, body, format="json")
        assert response.status_code in (401, 403), url
        assert response.json()["code"] == "not_authenticated"


# --- bad input ----------------------------------------------------------------------------------


def test_malformed_json_is_invalid_request(api_client):
    response = api_client.generic("POST", "/api/v1/workflows", "{not json", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"


def test_wrong_types_name_the_field(api_client, workflow):
    response = api_client.put(
        f"/api/v1/workflows/{workflow.pk}",
        {"graph": {"nodes": "x", "edges": []}, "expected_revision": "one"},
        format="json",
    )

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_request"
    assert set(body["extra"]["fields"]) == {"graph", "expected_revision"}


def test_unknown_node_type_is_reported_by_validate_and_refused_by_deploy(api_client, workflow):
    graph = copy.deepcopy(workflow.graph)
    graph["nodes"].append({"id": "weird", "type": "noSuchType", "position": {"x": 1, "y": 1}, "data": {}})
    saved = api_client.put(
        f"/api/v1/workflows/{workflow.pk}",
        {"graph": graph, "expected_revision": workflow.revision},
        format="json",
    )
    assert saved.status_code == 200
    weird = saved.json()["aliases"]["weird"]
    assert [(e["code"], e["node_id"]) for e in saved.json()["validation"]["errors"]] == [
        ("unknown_node_type", weird)
    ]

    deploy = api_client.post(f"/api/v1/workflows/{workflow.pk}/deploy")

    assert deploy.status_code == 400
    assert deploy.json()["code"] == "validation_failed"


def test_oversized_graph_is_graph_too_large(api_client, settings):
    settings.OPENCOMPANY_MAX_GRAPH_NODES = 10
    graph = {"nodes": [{"id": f"n{i}", "type": "aiAgent", "data": {}} for i in range(11)], "edges": []}

    response = api_client.post("/api/v1/workflows", {"name": "big", "graph": graph}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "graph_too_large"
    assert response.json()["extra"]["nodes"] == 11
    assert Workflow.objects.exists() is False


def test_default_graph_limits_are_5000_nodes_and_20000_edges(api_client):
    nodes = [{"id": f"n{i}", "type": "context", "data": {}} for i in range(5_001)]

    response = api_client.post(
        "/api/v1/workflows", {"name": "big", "graph": {"nodes": nodes, "edges": []}}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["extra"]["max_nodes"] == 5_000
    assert response.json()["extra"]["max_edges"] == 20_000


def test_oversized_body_is_413_too_large(api_client):
    payload = json.dumps({"name": "x", "graph": {"nodes": [], "edges": [], "pad": "a" * (2 * 1024 * 1024)}})

    response = api_client.generic("POST", "/api/v1/workflows", payload, content_type="application/json")

    assert response.status_code == 413
    assert response.json()["code"] == "too_large"
    assert Workflow.objects.exists() is False


def test_method_not_allowed_has_a_code(api_client):
    response = api_client.patch("/api/v1/node-specs", {}, format="json")

    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_unknown_api_path_is_a_json_404(api_client):
    response = api_client.get("/api/v1/nothing-here")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


# --- redaction -----------------------------------------------------------------------------------


def _secret_graph() -> dict[str, Any]:
    graph = demo_graph()
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"].update(
                {
                    "max_output_tokens": 512,
                    "api_key": "sk-live-123",
                    "accessToken": "tok-1",
                    "memory_content": "the owner's secret",
                    "thoughtSignature": "sig",
                }
            )
            node["data"]["apiKey"] = "sk-2"
            node["data"]["signature"] = "sig-2"
    return graph


def test_export_and_deploy_snapshot_hold_no_blocked_key_and_keep_max_tokens(owner, api_client):
    from graphs import services

    # unknown parameters fail the schema, so store them the way an old client might have, then export
    wf = services.workflow_create(owner=owner, name="s", graph=demo_graph())
    Workflow.objects.filter(pk=wf.pk).update(graph=_secret_graph())

    export = api_client.get(f"/api/v1/workflows/{wf.pk}/export").json()
    assert blocked_keys_in(export) == []
    agent = next(n for n in export["graph"]["nodes"] if n["type"] == "aiAgent")
    assert agent["data"]["parameters"]["max_output_tokens"] == 512
    assert "sk-live-123" not in json.dumps(export)

    Workflow.objects.filter(pk=wf.pk).update(
        graph=services.graph_normalize(workflow_id=wf.pk, graph=demo_graph()).graph
    )
    wf.refresh_from_db()
    graph = copy.deepcopy(wf.graph)
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"]["max_output_tokens"] = 256
    services.workflow_save(workflow=wf, graph=graph, expected_revision=wf.revision)
    Workflow.objects.filter(pk=wf.pk).update(
        graph=_secret_graph()
        | {
            "nodes": [
                n
                if n["type"] != "aiAgent"
                else {
                    **n,
                    "data": {
                        **n["data"],
                        "parameters": {**n["data"]["parameters"], "max_output_tokens": 256},
                    },
                }
                for n in _secret_graph()["nodes"]
            ]
        }
    )
    wf.refresh_from_db()
    deployment = services.workflow_deploy(workflow=wf)
    assert blocked_keys_in(deployment.graph) == []
    snap_agent = next(n for n in deployment.graph["nodes"] if n["type"] == "aiAgent")
    assert snap_agent["data"]["parameters"]["max_output_tokens"] == 256


def test_saved_graph_response_strips_secrets(api_client, workflow):
    graph = copy.deepcopy(workflow.graph)
    for node in graph["nodes"]:
        if node["type"] == "aiAgent":
            node["data"]["parameters"]["api_key"] = "sk-live-123"
            node["data"]["token"] = "t"

    response = api_client.put(
        f"/api/v1/workflows/{workflow.pk}",
        {"graph": graph, "expected_revision": workflow.revision},
        format="json",
    )

    assert response.status_code == 200
    assert "sk-live-123" not in json.dumps(response.json())
    assert "sk-live-123" not in json.dumps(Workflow.objects.get(pk=workflow.pk).graph)


def test_openapi_schema_validates():
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null")


def test_docs_page_and_schema_are_served(api_client, client, owner):
    client.force_login(owner)
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/api/schema/").status_code == 200


# --- limits and scale -----------------------------------------------------------------------------------


@pytest.mark.parametrize("edge_id", [None, "shared"])
def test_validate_answers_twenty_thousand_edges_without_ids_or_sharing_one(api_client, workflow, edge_id):
    edge = (
        {"source": "t", "target": "a"} if edge_id is None else {"id": edge_id, "source": "t", "target": "a"}
    )
    edges = [dict(edge) for _ in range(19_999)]
    edges.append({"source": "t", "target": "ghost"})
    graph = {
        "nodes": [
            {"id": "t", "type": "chatTrigger", "data": {}},
            {"id": "a", "type": "aiAgent", "data": {}},
        ],
        "edges": edges,
    }

    response = api_client.post(f"/api/v1/workflows/{workflow.pk}/validate", {"graph": graph}, format="json")

    assert response.status_code == 200
    assert response.json() == {
        "errors": [
            {
                "code": "dangling_edge",
                "node_id": None,
                "message": "Edge target 'ghost' does not match any node",
                "edge_id": "e-t--ghost-",
                "end": "target",
            }
        ],
        "warnings": [],
    }


def _send(api_client, workflow, entry, graph):
    if entry == "validate":
        return api_client.post(f"/api/v1/workflows/{workflow.pk}/validate", {"graph": graph}, format="json")
    if entry == "create":
        return api_client.post("/api/v1/workflows", {"name": "new", "graph": graph}, format="json")
    if entry == "import":
        return api_client.post("/api/v1/workflows/import", {"name": "new", "graph": graph}, format="json")
    return api_client.put(
        f"/api/v1/workflows/{workflow.pk}",
        {"graph": graph, "expected_revision": workflow.revision},
        format="json",
    )


@pytest.mark.parametrize("entry", ["validate", "create", "save", "import"])
def test_every_entry_point_refuses_a_graph_over_the_edge_cap_and_writes_nothing(
    api_client, workflow, settings, entry
):
    graph = demo_graph()
    nodes, edges = len(graph["nodes"]), len(graph["edges"])
    settings.OPENCOMPANY_MAX_GRAPH_EDGES = edges - 1

    response = _send(api_client, workflow, entry, graph)

    assert response.status_code == 400
    assert response.json()["code"] == "graph_too_large"
    assert response.json()["extra"] == {
        "nodes": nodes,
        "edges": edges,
        "max_nodes": 5_000,
        "max_edges": edges - 1,
        "limit": "edges",
    }
    assert list(Workflow.objects.values_list("pk", flat=True)) == [workflow.pk]
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.graph, stored.revision) == (workflow.graph, workflow.revision)


def test_deploy_refuses_a_stored_graph_over_the_edge_cap_and_admits_nothing(api_client, owner, settings):
    workflow = services.workflow_create(owner=owner, name="stored", graph=demo_graph())
    settings.OPENCOMPANY_MAX_GRAPH_EDGES = len(workflow.graph["edges"]) - 1

    response = api_client.post(f"/api/v1/workflows/{workflow.pk}/deploy")

    assert response.status_code == 400
    assert response.json()["code"] == "graph_too_large"
    assert response.json()["extra"]["limit"] == "edges"
    assert Deployment.objects.filter(workflow=workflow).exists() is False


@pytest.mark.parametrize("entry", ["validate", "create", "save", "import"])
def test_oversized_parameters_are_parameters_too_large_and_write_nothing(api_client, workflow, entry):
    graph = demo_graph()
    agent = next(n for n in graph["nodes"] if n["id"] == "agent")
    agent["data"]["parameters"] = {"system_prompt": "x" * 300_000}

    response = _send(api_client, workflow, entry, graph)

    assert response.status_code == 400
    assert response.json()["code"] == "parameters_too_large"
    assert response.json()["extra"] == {"node_id": "agent", "max_chars": 262_144}
    assert list(Workflow.objects.values_list("pk", flat=True)) == [workflow.pk]
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.graph, stored.revision) == (workflow.graph, workflow.revision)


@pytest.mark.parametrize("entry", ["validate", "create", "save", "import"])
def test_deeply_nested_node_data_is_graph_too_large_and_writes_nothing(api_client, workflow, entry):
    nested: Any = "leaf"
    for _ in range(40):
        nested = {"k": nested}
    graph = demo_graph()
    graph["nodes"][0]["data"]["condition"] = nested

    response = _send(api_client, workflow, entry, graph)

    assert response.status_code == 400
    assert response.json()["code"] == "graph_too_large"
    assert response.json()["extra"]["limit"] == "depth"
    assert response.json()["extra"]["max_depth"] == 32
    assert list(Workflow.objects.values_list("pk", flat=True)) == [workflow.pk]
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.graph, stored.revision) == (workflow.graph, workflow.revision)


LEAKY_KEYS = (
    "openai_key",
    "auth",
    "bearer",
    "pwd",
    "passphrase",
    "dsn",
    "jwt",
    "cookies",
    "signing_key",
    "X-Auth",
    "chat_history",
    "transcripts",
    "memory",
)
OPENAI_KEY = "sk-proj-Zx81kQ0pLmN4vB7cR2tY9wE3"


def _keys_in(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys_in(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys_in(v)}
    return set()


def test_an_export_keeps_only_declared_parameters_and_redacts_secret_values_wherever_they_sit(
    owner, api_client
):
    wf = services.workflow_create(owner=owner, name="s", graph=demo_graph())
    graph = copy.deepcopy(wf.graph)
    agent = next(n for n in graph["nodes"] if n["type"] == "aiAgent")
    agent["data"]["parameters"] = {
        "system_prompt": f"You are helpful. Call the API with {OPENAI_KEY} when asked.",
        "max_output_tokens": 512,
        **{key: "hunter2-value" for key in LEAKY_KEYS if key != "X-Auth"},
        "headers": {"X-Auth": "hunter2-value"},
    }
    agent["data"]["label"] = f"Agent ({OPENAI_KEY})"
    graph["edges"][0]["label"] = "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    # Stored as an old client might have left it: unknown parameters fail the schema on save.
    Workflow.objects.filter(pk=wf.pk).update(graph=graph)

    response = api_client.get(f"/api/v1/workflows/{wf.pk}/export")

    assert response.status_code == 200
    export = response.json()
    assert _keys_in(export) & set(LEAKY_KEYS) == set()
    assert "hunter2-value" not in json.dumps(export)
    assert "sk-" not in json.dumps(export)
    assert "ghp_" not in json.dumps(export)
    exported = next(n for n in export["graph"]["nodes"] if n["type"] == "aiAgent")
    assert exported["data"]["parameters"] == {
        "system_prompt": "You are helpful. Call the API with [redacted] when asked.",
        "max_output_tokens": 512,
    }
    assert exported["data"]["label"] == "Agent ([redacted])"
    imported = api_client.post("/api/v1/workflows/import", export, format="json")
    assert imported.status_code == 201


def test_twenty_thousand_edges_without_ids_validate_through_the_api_in_under_a_second(api_client, workflow):
    graph = {
        "nodes": [
            {"id": "t", "type": "chatTrigger", "data": {}},
            {"id": "a", "type": "aiAgent", "data": {}},
        ],
        "edges": [{"source": "t", "target": "a"} for _ in range(20_000)],
    }
    body = json.dumps({"graph": graph})
    url = f"/api/v1/workflows/{workflow.pk}/validate"
    api_client.post(url, {"graph": demo_graph()}, format="json")  # warm the specs and parameter checks
    timings, responses = [], []
    # The fastest of three: a busy machine's scheduler should not decide a test about growth.
    for _ in range(3):
        started = time.perf_counter()
        responses.append(api_client.post(url, body, content_type="application/json"))
        timings.append(time.perf_counter() - started)

    assert [r.status_code for r in responses] == [200, 200, 200]
    assert responses[-1].json() == {"errors": [], "warnings": []}
    assert min(timings) < 1.0
