"""JSON typed into an admin form that the input gate refuses (a lone surrogate, nesting far past the limit)
is a form error shown with the text as typed, never a server error, and nothing is saved."""

from __future__ import annotations

import pytest
from django.test import Client

from graphs.models import Workflow
from tests.graphs.test_admin import change_form, change_url

pytestmark = pytest.mark.django_db

SURROGATE = '{"graphVersion": 2, "nodes": [{"id": "\\ud800", "type": "aiAgent"}], "edges": []}'
DEEP = "[" * 50_000 + "]" * 50_000


@pytest.mark.parametrize(
    ("typed", "error"),
    [
        (SURROGATE, "Lone surrogate characters are not allowed."),
        (DEEP, "Nested deeper than 64 levels."),
    ],
)
def test_a_graph_the_gate_refuses_is_a_form_error_shown_as_typed(staff, workflow, typed, error):
    client = Client(raise_request_exception=False)
    client.force_login(staff)
    revision = workflow.revision

    response = client.post(change_url(workflow), change_form(workflow, graph=typed))

    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["graph"] == [error]
    assert str(form["graph"].value()) == typed
    assert Workflow.objects.get(pk=workflow.pk).revision == revision
