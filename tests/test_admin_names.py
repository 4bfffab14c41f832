"""The admin index names every model in correct English: no "Chat processs" or "Context archive
outboxs" made by adding an "s"."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.test import Client

pytestmark = pytest.mark.django_db

# Plurals that adding an "s" gets wrong: after s, x, z, ch, sh; and mass nouns.
WRONG_PLURAL = re.compile(r"(s|x|z|ch|sh)s$|feedbacks$")


def test_every_registered_model_has_a_correct_plural_name():
    plurals = {model._meta.label: str(model._meta.verbose_name_plural) for model in admin.site._registry}

    assert {label: name for label, name in plurals.items() if WRONG_PLURAL.search(name)} == {}
    assert plurals["chat.ChatProcess"] == "chat processes"
    assert plurals["graphs.ContextArchiveOutbox"] == "Context archive outbox entries"
    assert plurals["chat.ChatFeedback"] == "chat feedback"
    assert plurals["graphs.WorkflowTransfer"] == "workflow transfers"


def test_the_admin_index_shows_the_plural_names(staff):
    client = Client()
    client.force_login(staff)

    page = client.get("/admin/").content.decode()

    assert "Chat processes" in page
    assert "Context archive outbox entries" in page
    assert "Chat processs" not in page
    assert "outboxs" not in page
