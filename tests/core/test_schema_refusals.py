"""Refusals the OpenAPI schema states as the services make them: `switch` on an undeployed workflow
(`not_running`), the format of a `client_message_id` (send and edit), and a tag that looks blank."""

from __future__ import annotations

import re
import sys
from io import StringIO
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from chat.services._common import _check_client_id
from memory.fields import LABEL_PATTERN, clean_tags
from opencompany.core.errors import ApplicationError

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    out = StringIO()
    call_command("spectacular", stdout=out)
    return yaml.safe_load(out.getvalue())


def _codes(op: dict[str, Any], status: str) -> set[str]:
    return set(
        op["responses"][status]["content"]["application/json"]["schema"]["allOf"][1]["properties"]["code"][
            "enum"
        ]
    )


def _request(schema: dict[str, Any], path: str) -> dict[str, Any]:
    ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return schema["components"]["schemas"][ref.rsplit("/", 1)[1]]


def test_switch_documents_not_running(schema):
    switch = schema["paths"]["/api/v1/workflows/{workflow_id}/chat/switch"]["post"]

    assert "not_running" in _codes(switch, "409")


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/workflows/{workflow_id}/chat/messages",
        "/api/v1/workflows/{workflow_id}/chat/messages/{message_id}/edit",
    ],
)
def test_the_client_message_id_format_is_the_one_the_service_checks(schema, path):
    field = _request(schema, path)["properties"]["client_message_id"]
    string, blank = field["oneOf"]  # drf-spectacular states "or empty" apart
    pattern = re.compile(string["pattern"])

    assert (string["maxLength"], blank["maxLength"], field["nullable"]) == (100, 0, True)
    for value in ["a", "A-b_c.d:9", "x" * 100, "", "x" * 101, "no spaces", "é", "abc\n", "a/b"]:
        try:
            _check_client_id(value)
            accepted = True
        except ApplicationError:
            accepted = False
        assert bool(pattern.fullmatch(value)) is accepted, value


def test_a_tag_the_schema_calls_blank_is_exactly_one_the_service_refuses(schema):
    tag = _request(schema, "/api/v1/workflows/{workflow_id}/memory/{memory_node_id}/items")["properties"][
        "tags"
    ]
    assert tag["items"]["pattern"] == LABEL_PATTERN
    pattern = re.compile(LABEL_PATTERN)

    blank = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF and not pattern.search(chr(c))]

    for c in blank:  # every character the schema calls blank is refused alone, and surrounded by more
        for tag_text in (chr(c), f" {chr(c)}\t"):
            with pytest.raises(ApplicationError):
                clean_tags([tag_text])
    looks_blank = {c for c in range(sys.maxunicode + 1) if chr(c).isspace() or c < 0x20 or c == 0x7F}
    assert set(blank) == looks_blank  # and every other character makes a tag
    assert clean_tags(["\u200b", "a\u3000"]) == ["\u200b", "a"]
