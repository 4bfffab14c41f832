"""Every admin page renders for staff: changelists and the change page of a real row of each model."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib import admin
from django.urls import reverse

from chat import services as chat_services
from chat.executor import execute_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_admin_changelist_and_change_page_renders(client, staff, workflow, settings):
    settings.OPENCOMPANY_RUN_EXECUTOR = "manual"
    settings.OPENCOMPANY_OFFLINE_PACING_MS = 0
    for text in ("remember that the gate code is 4321", "note check the gate", "hello"):
        admission = chat_services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text)
        assert async_to_sync(execute_run)(admission.run.run_id) == "finished"
    client.force_login(staff)

    checked = 0
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        changelist = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        assert changelist.status_code == 200, meta.label
        row = model_admin.get_queryset(changelist.wsgi_request).first()
        if row is not None:
            change = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk]))
            assert change.status_code == 200, meta.label
            checked += 1
    assert checked >= 10
