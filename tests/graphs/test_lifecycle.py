"""Graph lifecycle through the services: save, Context removal and the archive outbox, delete,
deploy/reset generations, legacy rewrite, subagents."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from graphs import services
from graphs.hooks import _archivers, erasers, register_context_archiver
from graphs.models import ContextArchiveOutbox, Deployment, LegacyArtifact, Workflow
from memory import services as memory_services
from memory.models import MemoryItem
from memory.scope import memory_scope
from opencompany.core.errors import ApplicationError
from tests.conftest import demo_graph, make_workflow, node_id

pytestmark = pytest.mark.django_db


@pytest.fixture
def archiver_calls() -> Any:
    """A recording archiver registered for the test (restores the registry afterwards)."""
    calls: list[dict[str, Any]] = []
    saved = dict(_archivers)

    def record(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return {"archived": 0}

    register_context_archiver("test-recorder", record)
    yield calls
    _archivers.clear()
    _archivers.update(saved)


def _without_context(graph: dict[str, Any], ctx_id: str) -> dict[str, Any]:
    out = copy.deepcopy(graph)
    out["nodes"] = [n for n in out["nodes"] if n["id"] != ctx_id]
    out["edges"] = [e for e in out["edges"] if ctx_id not in (e["source"], e["target"])]
    return out


def test_create_canonicalizes_ids(owner):
    workflow = services.workflow_create(owner=owner, name="W", graph=demo_graph())

    ids = sorted(n["id"] for n in workflow.graph["nodes"])
    assert ids == sorted(
        [
            node_id(workflow, "chatTrigger"),
            node_id(workflow, "aiAgent"),
            node_id(workflow, "context"),
            node_id(workflow, "simpleMemory"),
        ]
    )
    assert workflow.revision == 1


def test_deleting_an_agent_keeps_its_context(owner):
    workflow = make_workflow(owner, deploy=False)
    agent = node_id(workflow, "aiAgent")
    graph = copy.deepcopy(workflow.graph)
    graph["nodes"] = [n for n in graph["nodes"] if n["id"] != agent]
    graph["edges"] = [e for e in graph["edges"] if agent not in (e["source"], e["target"])]

    write = services.workflow_save(workflow=workflow, graph=graph, expected_revision=1)

    assert node_id(workflow, "context") in {n["id"] for n in write.workflow.graph["nodes"]}
    assert ContextArchiveOutbox.objects.count() == 0


def test_removing_a_context_writes_one_outbox_row_and_the_drain_completes_it(owner, archiver_calls):
    workflow = make_workflow(owner, deploy=False)
    ctx = node_id(workflow, "context")

    services.workflow_save(
        workflow=workflow, graph=_without_context(workflow.graph, ctx), expected_revision=1
    )

    row = ContextArchiveOutbox.objects.get()
    assert (row.workflow_id, row.context_node_id, row.reason) == (workflow.pk, ctx, "context_removed")
    # on_commit does not fire inside the test transaction: the next get drains.
    services.workflow_get(workflow=workflow)
    row.refresh_from_db()
    assert row.state == "done"
    assert archiver_calls == [
        {
            "workflow_id": workflow.pk,
            "owner_id": owner.pk,
            "context_node_id": ctx,
            "reason": "context_removed",
        }
    ]


def test_removing_a_context_drains_after_commit(owner, archiver_calls, django_capture_on_commit_callbacks):
    workflow = make_workflow(owner, deploy=False)
    ctx = node_id(workflow, "context")

    with django_capture_on_commit_callbacks(execute=True):
        services.workflow_save(
            workflow=workflow, graph=_without_context(workflow.graph, ctx), expected_revision=1
        )

    assert ContextArchiveOutbox.objects.get().state == "done"
    assert len(archiver_calls) == 1


def test_refused_save_writes_no_outbox_row_and_keeps_graph(owner):
    workflow = make_workflow(owner, deploy=False)
    ctx, agent = node_id(workflow, "context"), node_id(workflow, "aiAgent")
    graph = _without_context(workflow.graph, ctx)
    # two Contexts on the one agent: a topology error
    graph["nodes"] += [
        {"id": "c1", "type": "context", "position": {"x": 0, "y": 0}, "data": {}},
        {"id": "c2", "type": "context", "position": {"x": 0, "y": 0}, "data": {}},
    ]
    graph["edges"] += [
        {
            "id": "x1",
            "source": "c1",
            "sourceHandle": "output-context",
            "target": agent,
            "targetHandle": "input-context",
        },
        {
            "id": "x2",
            "source": "c2",
            "sourceHandle": "output-context",
            "target": agent,
            "targetHandle": "input-context",
        },
    ]
    before = copy.deepcopy(workflow.graph)

    with pytest.raises(ApplicationError) as err:
        services.workflow_save(workflow=workflow, graph=graph, expected_revision=1)

    assert err.value.code == "invalid_context_topology"
    assert [e["code"] for e in err.value.extra["errors"]] == ["multiple_contexts"]
    workflow.refresh_from_db()
    assert workflow.graph == before
    assert workflow.revision == 1
    assert ContextArchiveOutbox.objects.exists() is False


def test_stale_revision_is_refused_and_writes_nothing(owner):
    workflow = make_workflow(owner, deploy=False)
    services.workflow_save(workflow=workflow, graph=workflow.graph, expected_revision=1, name="renamed")

    with pytest.raises(ApplicationError) as err:
        services.workflow_save(workflow=workflow, graph=demo_graph(), expected_revision=1, name="lost")

    assert err.value.code == "revision_conflict"
    assert err.value.extra == {"current_revision": 2}
    workflow.refresh_from_db()
    assert (workflow.name, workflow.revision) == ("renamed", 2)


def test_archiver_that_raises_leaves_the_row_pending_and_the_next_get_retries(owner, archiver_calls):
    workflow = make_workflow(owner, deploy=False)
    ctx = node_id(workflow, "context")
    failures = {"left": 1}

    def flaky(**kwargs: Any) -> dict[str, Any]:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("archive store unavailable")
        return {"archived": 1}

    register_context_archiver("test-flaky", flaky)
    services.workflow_save(
        workflow=workflow, graph=_without_context(workflow.graph, ctx), expected_revision=1
    )

    assert services.outbox_drain(workflow_id=workflow.pk) == {"completed": 0, "pending": 1}
    row = ContextArchiveOutbox.objects.get()
    assert (row.state, row.attempts) == ("pending", 1)
    assert row.last_error.startswith("RuntimeError")

    services.workflow_get(workflow=workflow)

    row.refresh_from_db()
    assert (row.state, row.attempts, row.last_error) == ("done", 2, "")


def test_deleting_a_workflow_runs_every_eraser_with_its_ids_and_enqueues_nothing(owner, monkeypatch):
    workflow = make_workflow(owner, deploy=False)
    calls: list[dict[str, Any]] = []

    def record(**kwargs: Any) -> dict[str, int]:
        calls.append(kwargs)
        return {"rows": 0}

    monkeypatch.setattr("graphs.services.erase.erasers", lambda: {"recorder": record})

    report = services.workflow_delete(workflow=workflow)

    assert calls == [{"owner_id": owner.pk, "workflow_ids": [workflow.pk]}]
    assert report == {"recorder": {"rows": 0}, "graphs": {"archive_outbox": 0}, "workflows": 1}
    assert Workflow.objects.filter(pk=workflow.pk).exists() is False
    assert ContextArchiveOutbox.objects.exists() is False


def test_a_failed_eraser_rolls_the_whole_delete_back(owner, monkeypatch):
    workflow = make_workflow(owner, deploy=False)
    scope = memory_scope(workflow=workflow, memory_node_id=node_id(workflow, "simpleMemory"))
    memory_services.memory_remember(scope=scope, content="kept", actor="owner:1")
    real = erasers()

    def boom(**kwargs: Any) -> dict[str, int]:
        raise RuntimeError("erase failed")

    monkeypatch.setattr("graphs.services.erase.erasers", lambda: {**real, "zz-boom": boom})
    with pytest.raises(RuntimeError):
        services.workflow_delete(workflow=workflow)

    assert Workflow.objects.filter(pk=workflow.pk).exists() is True
    assert MemoryItem.objects.filter(workflow_id=workflow.pk).count() == 1


def test_legacy_rewrite_into_two_agents(owner):
    graph = {
        "nodes": [
            {
                "id": "memory",
                "type": "simpleMemory",
                "position": {"x": 0, "y": 0},
                "data": {"parameters": {"memory_content": "## Human\nhello", "last_session_id": "uuid-1"}},
            },
            {"id": "first", "type": "aiAgent", "position": {"x": 400, "y": 0}, "data": {}},
            {"id": "second", "type": "aiAgent", "position": {"x": 800, "y": 0}, "data": {}},
        ],
        "edges": [
            {
                "id": "l1",
                "source": "memory",
                "target": "first",
                "sourceHandle": "output-memory",
                "targetHandle": "input-memory",
            },
            {
                "id": "l2",
                "source": "memory",
                "target": "second",
                "sourceHandle": "output-memory",
                "targetHandle": "input-memory",
            },
        ],
    }

    write = services.workflow_create_report(owner=owner, name="legacy", graph=graph)

    wf = write.workflow
    mem, first, second = node_id(wf, "simpleMemory"), node_id(wf, "aiAgent", 1), node_id(wf, "aiAgent", 2)
    edges = wf.graph["edges"]
    tool_edges = sorted((e["source"], e["target"]) for e in edges if e["targetHandle"] == "input-tools")
    assert tool_edges == [(mem, first), (mem, second)]
    ctx_edges = sorted(e["target"] for e in edges if e["targetHandle"] == "input-context")
    assert ctx_edges == [first, second]
    assert len([n for n in wf.graph["nodes"] if n["type"] == "context"]) == 2
    assert not [e for e in edges if e["targetHandle"] == "input-memory"]
    artifacts = LegacyArtifact.objects.filter(workflow=wf).order_by("agent_node_id")
    assert [(a.agent_node_id, a.markdown) for a in artifacts] == [
        (first, "## Human\nhello"),
        (second, "## Human\nhello"),
    ]
    assert [w["code"] for w in write.warnings] == ["legacy_memory_migrated", "legacy_memory_migrated"]
    assert all("vector" in w["message"] for w in write.warnings)
    assert "memory_content" not in str(wf.graph)
    assert "uuid-1" not in str(wf.graph)
    from memory.models import MemoryItem  # the memory app owns items; none may appear

    assert MemoryItem.objects.exists() is False


def test_deploy_admits_generations_and_reset_closes_them(owner):
    workflow = make_workflow(owner, deploy=False)

    first = services.workflow_deploy(workflow=workflow)
    again = services.workflow_deploy(workflow=workflow)
    outcome = services.workflow_reset(workflow=workflow)
    repeat = services.workflow_reset(workflow=workflow)
    second = services.workflow_deploy(workflow=workflow)

    assert (first.generation, again.generation, again.pk) == (1, 1, first.pk)
    assert (outcome["generation"], outcome["state"], outcome["idempotent"]) == (1, "reset", False)
    assert repeat["idempotent"] is True
    assert (second.generation, second.state) == (2, "live")
    assert list(
        Deployment.objects.filter(workflow=workflow).order_by("generation").values_list("state", flat=True)
    ) == [
        "reset",
        "live",
    ]


def test_deploy_refuses_any_validation_error(owner):
    graph = demo_graph()
    graph["edges"].append(
        {
            "id": "bad",
            "source": "agent",
            "target": "ghost",
            "sourceHandle": "output-main",
            "targetHandle": "input-main",
        }
    )
    workflow = services.workflow_create(owner=owner, name="W", graph=graph)

    with pytest.raises(ApplicationError) as err:
        services.workflow_deploy(workflow=workflow)

    assert err.value.code == "validation_failed"
    assert "dangling_edge" in {e["code"] for e in err.value.extra["errors"]}
    assert Deployment.objects.exists() is False


def test_one_live_deployment_per_workflow_is_a_constraint(owner):
    from django.db import IntegrityError, transaction

    workflow = make_workflow(owner)
    with pytest.raises(IntegrityError), transaction.atomic():
        Deployment.objects.create(workflow=workflow, generation=2, state="live")


def test_add_subagent_wires_a_fresh_context(owner):
    graph = {
        "nodes": [{"id": "lead", "type": "teamLead", "position": {"x": 0, "y": 0}, "data": {}}],
        "edges": [],
    }
    workflow = services.workflow_create(owner=owner, name="team", graph=graph)
    lead = node_id(workflow, "teamLead")

    out = services.workflow_add_subagent(workflow=workflow, agent_node_id=lead, label="Researcher")

    assert out["node_id"] == node_id(workflow, "aiAgent")
    assert out["context_node_id"] == node_id(workflow, "context")
    pairs = {(e["source"], e["sourceHandle"], e["target"], e["targetHandle"]) for e in out["graph"]["edges"]}
    assert (out["context_node_id"], "output-context", out["node_id"], "input-context") in pairs
    assert (out["node_id"], "output-main", lead, "input-teammates") in pairs
    workflow.refresh_from_db()
    assert workflow.revision == 2


def test_add_subagent_refuses_a_non_lead(owner):
    workflow = make_workflow(owner, deploy=False)

    with pytest.raises(ApplicationError) as err:
        services.workflow_add_subagent(workflow=workflow, agent_node_id=node_id(workflow, "aiAgent"))

    assert err.value.code == "not_a_team_lead"
    workflow.refresh_from_db()
    assert workflow.revision == 1


def test_a_graph_larger_than_a_request_body_is_refused_from_any_caller_and_writes_nothing(owner, settings):
    settings.OPENCOMPANY_MAX_BODY_BYTES = 10_000
    graph = demo_graph()
    graph["nodes"][0]["data"]["label"] = "x" * 10_000

    with pytest.raises(ApplicationError) as err:
        services.workflow_create(owner=owner, name="W", graph=graph)

    assert err.value.code == "graph_too_large"
    assert err.value.extra["limit"] == "chars"
    assert err.value.extra["max_chars"] == 10_000
    assert Workflow.objects.exists() is False


def test_add_subagent_refuses_to_grow_a_graph_past_the_node_cap(owner, settings):
    graph = demo_graph()
    graph["nodes"].append({"id": "lead", "type": "teamLead", "position": {"x": 0, "y": 0}, "data": {}})
    workflow = services.workflow_create(owner=owner, name="W", graph=graph)
    settings.OPENCOMPANY_MAX_GRAPH_NODES = len(workflow.graph["nodes"]) + 1

    with pytest.raises(ApplicationError) as err:
        services.workflow_add_subagent(workflow=workflow, agent_node_id=node_id(workflow, "teamLead"))

    assert err.value.code == "graph_too_large"
    assert err.value.extra["limit"] == "nodes"
    stored = Workflow.objects.get(pk=workflow.pk)
    assert (stored.graph, stored.revision) == (workflow.graph, workflow.revision)
