"""Fuzzing every API body and every websocket frame type with hostile values (arbitrary unicode, NULs,
lone surrogates, huge and negative numbers, NaN, deep nesting, wrong types): never a 500 or an
`internal_error`, and a refused input leaves the database as it was. Bounded, so CI stays quick;
derandomized under CI so a run is reproducible."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat.wsclient import connect, next_frame
from tests.conftest import node_id
from tests.rows import row_counts

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
FUZZ = settings(
    deadline=None,
    database=None,
    derandomize=CI,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

HOSTILE_TEXT = st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "\U0001f375", "", " ", "\u202e"])
TEXT = st.one_of(st.text(max_size=40), HOSTILE_TEXT, st.text(max_size=5).map(lambda s: s + "\x00"))
NUMBER = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**20]),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=8), HOSTILE_TEXT), inner, max_size=3),
    ),
    max_leaves=8,
)
DEEP = st.integers(min_value=60, max_value=3000).map(lambda n: "[" * n + "]" * n)


def _raw(value: Any) -> str:
    return json.dumps(value, allow_nan=True)  # NaN and Infinity go out as the tokens a client could send


def _body(fields: list[str]) -> st.SearchStrategy[str]:
    """A request body: an object over the endpoint's fields (and strangers) with hostile values, a
    deeply nested value under one of them, or something that is not a JSON object at all."""
    names = st.one_of(st.sampled_from(fields), st.text(max_size=6), HOSTILE_TEXT)
    objects = st.dictionaries(names, VALUE, max_size=5).map(_raw)
    deep = st.tuples(st.sampled_from(fields), DEEP).map(lambda pair: '{"%s": %s}' % pair)  # noqa: UP031
    junk = st.one_of(
        VALUE.map(_raw), DEEP, st.text(max_size=30), st.sampled_from(['{"a": NaN}', "{", '"\\ud800"'])
    )
    return st.one_of(objects, objects, deep, junk)


ENDPOINTS: list[tuple[str, str, list[str]]] = [
    ("post", "/api/v1/auth/token", ["username", "password"]),
    ("post", "/api/v1/workflows", ["name", "graph"]),
    ("post", "/api/v1/workflows/import", ["name", "graph"]),
    ("put", "{wf}", ["name", "graph", "expected_revision"]),
    ("post", "{wf}/validate", ["graph"]),
    ("post", "{wf}/agents/{agent}/subagents", ["type", "label"]),
    ("post", "{wf}/memory/{mem}/items", ["content", "title", "category", "tags", "expires_at"]),
    (
        "patch",
        "{wf}/memory/{mem}/items/mem_x",
        ["expected_version", "content", "title", "tags", "expires_at"],
    ),
    ("post", "{wf}/memory/{mem}/clear", ["confirm"]),
    ("post", "{wf}/chat/messages", ["text", "client_message_id", "expected_revision"]),
    ("post", "{wf}/chat/messages/m_x/edit", ["text", "client_message_id", "expected_revision"]),
    ("post", "{wf}/chat/messages/m_x/retry", ["expected_revision"]),
    ("post", "{wf}/chat/messages/m_x/feedback", ["value"]),
    ("post", "{wf}/chat/switch", ["message_id", "expected_revision"]),
    ("post", "{wf}/chat/runs/run_x/stop", []),
]
QUERIES = [
    ("get", "{wf}/memory/{mem}/items", ["query", "limit", "cursor", "tags", "categories"]),
    ("get", "{wf}/memory/{mem}/items/{id}", []),
    ("delete", "{wf}/memory/{mem}/items/{id}", ["expected_version"]),
    ("get", "{wf}/memory/{mem}/items/{id}/revisions", ["limit", "cursor"]),
    ("get", "{wf}/memory/{id}/items", ["query"]),
    ("get", "{wf}/conversations/{id}", ["generation", "cursor", "limit"]),
    ("delete", "{wf}/conversations/{id}", ["generation"]),
    ("get", "{wf}/chat", ["before", "limit"]),
    ("get", "{wf}/chat/runs/{id}", []),
    ("post", "{wf}/chat/runs/{id}/stop", []),
    ("post", "{wf}/chat/messages/{id}/retry", []),
    ("get", "/api/v1/workflows/{id}", []),
    ("get", "/api/v1/workflows", ["cursor"]),
]
PATH_IDS = st.one_of(
    HOSTILE_TEXT, st.text(min_size=1, max_size=12), st.text(max_size=6).map(lambda s: s + "\x00")
)


def _url(template: str, workflow: Any, **ids: str) -> str:
    base = f"/api/v1/workflows/{workflow.pk}"
    values = {"agent": node_id(workflow, "aiAgent"), "mem": node_id(workflow, "simpleMemory"), **ids}
    return template.replace("{wf}", base).format(**values)


def _quote(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _assert_answered(response: Any, before: dict[str, int]) -> None:
    assert response.status_code < 500, response.content[:300]
    if response.get("Content-Type", "").startswith("application/json"):
        assert response.json().get("code") != "internal_error"
    if response.status_code >= 400:
        assert row_counts() == before


@pytest.mark.django_db
@settings(FUZZ, max_examples=250)
@given(data=st.data())
def test_no_api_body_ever_answers_500_and_a_refused_one_writes_nothing(api_client, workflow, data):
    api_client.raise_request_exception = False
    method, template, fields = data.draw(st.sampled_from(ENDPOINTS))
    url = _url(template, workflow)
    body = data.draw(_body(fields or ["x"]))
    before = row_counts()

    response = getattr(api_client, method)(
        url, data=body.encode("utf-8", "surrogatepass"), content_type="application/json"
    )

    _assert_answered(response, before)


@pytest.mark.django_db
@settings(FUZZ, max_examples=120)
@given(data=st.data())
def test_no_query_or_path_id_ever_answers_500_and_a_refused_one_writes_nothing(api_client, workflow, data):
    api_client.raise_request_exception = False
    method, template, fields = data.draw(st.sampled_from(QUERIES))
    params = data.draw(
        st.dictionaries(st.sampled_from(fields or ["x"]), st.one_of(TEXT, NUMBER.map(str)), max_size=3)
    )
    query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in params.items())
    path_id = _quote(data.draw(PATH_IDS)) or "x"
    url = _url(template, workflow, id=path_id) + (f"?{query}" if query else "")
    before = row_counts()

    response = getattr(api_client, method)(url)

    _assert_answered(response, before)


FRAME_TYPES = ["send", "edit", "retry", "switch", "stop", "feedback", "history", "resume", "ping"]
FRAME_FIELDS = [
    "text",
    "message_id",
    "run_id",
    "client_message_id",
    "expected_revision",
    "value",
    "before",
    "limit",
    "after_seq",
    "request_id",
]


def _frame() -> st.SearchStrategy[str]:
    kind = st.one_of(st.sampled_from(FRAME_TYPES), SCALAR)
    objects = st.builds(
        lambda t, rest: _raw({**rest, "type": t}),
        kind,
        st.dictionaries(st.one_of(st.sampled_from(FRAME_FIELDS), HOSTILE_TEXT), VALUE, max_size=5),
    )
    deep = st.tuples(st.sampled_from(FRAME_TYPES), DEEP).map(lambda p: '{"type": "%s", "text": %s}' % p)  # noqa: UP031
    junk = st.one_of(VALUE.map(_raw), DEEP, st.text(min_size=1, max_size=20))
    return st.one_of(objects, objects, objects, deep, junk)


@pytest.mark.django_db(transaction=True)
@settings(FUZZ, max_examples=40)
@given(frames=st.lists(_frame(), min_size=1, max_size=6))
def test_no_websocket_frame_ever_answers_internal_error_and_a_refused_one_writes_nothing(
    workflow, owner, frames
):
    async def scenario() -> None:
        communicator, connected, _ = await connect(workflow.pk, owner)
        assert connected
        assert (await next_frame(communicator))["type"] == "thread"
        for raw in frames:
            before = await sync_to_async(row_counts)()
            await communicator.send_to(text_data=raw)
            while True:
                reply = await next_frame(communicator, timeout=10)
                if reply["type"] in ("ack", "error", "thread", "run.snapshot"):
                    break
            assert reply.get("code") != "internal_error", (raw, reply)
            if reply["type"] == "error":
                assert await sync_to_async(row_counts)() == before, (raw, reply)
        await communicator.disconnect()

    async_to_sync(scenario)()
