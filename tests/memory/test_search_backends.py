"""Only the recall backends know which database they run on."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

import pytest
from django.db import connection

from memory import search
from memory.search import base, maintenance, query, scoring, statements
from memory.search.postgres import PostgresBackend
from memory.search.sqlite import SqliteBackend

SHARED: list[ModuleType] = [base, statements, maintenance, query, scoring]


def _vendor_checks(module: ModuleType) -> list[str]:
    """Every read of a `.vendor` attribute and every database name written in the module's code."""
    found = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Attribute) and node.attr == "vendor":
            found.append(f"line {node.lineno}: .vendor")
        if isinstance(node, ast.Constant) and node.value in ("postgresql", "sqlite"):
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


@pytest.mark.parametrize("module", SHARED, ids=lambda module: module.__name__)
def test_shared_recall_code_asks_no_database_which_it_is(module):
    assert _vendor_checks(module) == []


def test_the_backend_in_use_is_the_default_databases():
    expected = {"postgresql": PostgresBackend, "sqlite": SqliteBackend}[connection.vendor]

    assert search.backend_for_database() is expected
    assert type(base.get_backend()) is expected
