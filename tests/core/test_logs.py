"""Database errors reach the logs as class, code and table only: never the data the database refused."""

from __future__ import annotations

import io
import logging

import pytest
from django.db import IntegrityError, connection, transaction

from graphs.models import Workflow
from opencompany.core.logs import database_error_summary, error_text

pytestmark = pytest.mark.django_db

NAME = "Acquisition of Initech"
PROMPT = "negotiate below 4.2 million"


def _refused_insert(owner) -> IntegrityError:
    graph = {"nodes": [{"id": "a", "type": "aiAgent", "data": {"parameters": {"system_prompt": PROMPT}}}]}
    try:
        with transaction.atomic():
            Workflow.objects.create(owner=owner, name=NAME, graph=graph, revision=None)  # type: ignore[misc]
    except IntegrityError as exc:
        return exc
    raise AssertionError("the database accepted a workflow without a revision")


def test_a_logged_database_error_names_its_class_code_and_table_and_nothing_of_the_data(owner):
    error = _refused_insert(owner)
    handler = logging.getHandlerByName("console")
    assert handler is not None
    stream = io.StringIO()
    previous = handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        try:
            raise error
        except IntegrityError:
            logging.getLogger("opencompany.core.api").exception(
                "unhandled error in API view %s", "IntegrityError"
            )
    finally:
        handler.setStream(previous)  # type: ignore[attr-defined]

    written = stream.getvalue()
    code = "sqlstate=23502" if connection.vendor == "postgresql" else "code=SQLITE_CONSTRAINT_NOTNULL"
    assert written.endswith(
        "ERROR opencompany.core.api unhandled error in API view IntegrityError "
        f"(database error: IntegrityError {code} table=graphs_workflow)\n"
    )
    assert NAME not in written
    assert PROMPT not in written
    assert "Traceback" not in written
    assert NAME in str(error) or connection.vendor != "postgresql"  # the raw message does quote the row


def test_error_text_keeps_other_errors_short_and_database_errors_bare(owner):
    assert error_text(ValueError("x" * 600)) == "ValueError: " + "x" * 500
    assert NAME not in error_text(_refused_insert(owner))
    assert database_error_summary(ValueError("no")) is None
