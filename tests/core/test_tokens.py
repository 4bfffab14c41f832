"""API tokens: an expiry, revocation one by one or all at once, and revocation on logout and on a
password change, which also close the owner's websockets."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from opencompany.core.tokens import token_issue
from tests.chat.wsclient import connect, next_frame

PASSWORD = "owner-pass-123"


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.mark.django_db
def test_a_token_answers_its_expiry_one_ttl_ahead_and_is_kept_only_as_a_digest(owner, anon_client, settings):
    settings.OPENCOMPANY_TOKEN_TTL_S = 3600
    before = timezone.now()

    response = anon_client.post(
        "/api/v1/auth/token", {"username": "owner", "password": PASSWORD}, format="json"
    )

    assert response.status_code == 200
    body = response.json()
    assert sorted(body) == ["expires_at", "token"]
    stored = AuthToken.objects.get()
    assert stored.user_id == owner.pk
    assert body["token"] not in (stored.digest, stored.token_key)
    expires_at = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert expires_at == stored.expiry
    assert before + timedelta(seconds=3600) <= expires_at <= timezone.now() + timedelta(seconds=3600)
    assert _client(body["token"]).get("/api/v1/workflows").status_code == 200


@pytest.mark.django_db
def test_a_token_past_its_expiry_is_refused_and_deleted(owner):
    token, _ = token_issue(user=owner)
    AuthToken.objects.update(expiry=timezone.now() - timedelta(seconds=1))

    response = _client(token).get("/api/v1/workflows")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert AuthToken.objects.exists() is False


@pytest.mark.django_db
def test_revoke_makes_the_presented_token_unusable_and_keeps_the_others(owner):
    revoked, _ = token_issue(user=owner)
    kept, _ = token_issue(user=owner)

    response = _client(revoked).post("/api/v1/auth/token/revoke", {}, format="json")

    assert (response.status_code, response.json()) == (200, {"revoked": 1})
    assert _client(revoked).get("/api/v1/workflows").status_code == 401
    assert _client(kept).get("/api/v1/workflows").status_code == 200
    assert AuthToken.objects.count() == 1


@pytest.mark.django_db
def test_revoke_all_revokes_every_token_of_the_owner_and_no_one_elses(owner, other_owner):
    first, _ = token_issue(user=owner)
    second, _ = token_issue(user=owner)
    others, _ = token_issue(user=other_owner)

    response = _client(first).post("/api/v1/auth/token/revoke", {"all": True}, format="json")

    assert (response.status_code, response.json()) == (200, {"revoked": 2})
    assert _client(second).get("/api/v1/workflows").status_code == 401
    assert _client(others).get("/api/v1/workflows").status_code == 200


@pytest.mark.django_db
def test_revoke_without_a_token_or_all_is_invalid_request_and_revokes_nothing(owner, client):
    token_issue(user=owner)
    client.force_login(owner)

    response = client.post("/api/v1/auth/token/revoke", {}, content_type="application/json")

    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    assert AuthToken.objects.count() == 1


@pytest.mark.django_db
def test_logging_out_revokes_the_owners_tokens(owner, other_owner, client):
    token, _ = token_issue(user=owner)
    others, _ = token_issue(user=other_owner)
    assert client.login(username="owner", password=PASSWORD)

    response = client.post("/accounts/logout/")

    assert response.status_code == 302
    assert _client(token).get("/api/v1/workflows").status_code == 401
    assert _client(others).get("/api/v1/workflows").status_code == 200
    assert list(AuthToken.objects.values_list("user_id", flat=True)) == [other_owner.pk]


@pytest.mark.django_db
def test_a_password_change_revokes_the_owners_tokens(owner):
    token, _ = token_issue(user=owner)

    owner.set_password("a-new-pass-456")
    owner.save()

    assert _client(token).get("/api/v1/workflows").status_code == 401
    assert AuthToken.objects.exists() is False


def _logout(cookie: str) -> int:
    name, _, key = cookie.partition("=")
    client = Client()
    client.cookies[name] = key
    return client.post("/accounts/logout/").status_code


@pytest.mark.django_db(transaction=True)
async def test_logging_out_closes_that_sessions_socket_and_no_other(workflow, owner):
    leaving, connected, _ = await connect(workflow.pk, owner)
    assert connected
    assert (await next_frame(leaving))["type"] == "thread"
    staying, connected, _ = await connect(workflow.pk, owner)
    assert connected
    assert (await next_frame(staying))["type"] == "thread"
    cookie = next(
        v.decode() for k, v in leaving.scope["headers"] if k == b"cookie"
    )  # the session of the first socket

    assert await sync_to_async(_logout)(cookie) == 302

    assert await leaving.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    assert await staying.receive_nothing(timeout=0.3) is True
    await staying.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_password_change_closes_every_socket_of_the_owner(workflow, owner):
    sockets = []
    for _ in range(2):
        communicator, connected, _ = await connect(workflow.pk, owner)
        assert connected
        assert (await next_frame(communicator))["type"] == "thread"
        sockets.append(communicator)

    def change_password() -> None:
        owner.set_password("a-new-pass-456")
        owner.save()

    await sync_to_async(change_password)()

    for communicator in sockets:
        assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
