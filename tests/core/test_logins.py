"""The sign-in throttle: per client address (never a header the client chose) and per username, on the
token endpoint, the login form and the admin login, with a lockout that doubles."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.contrib.auth import SESSION_KEY
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from knox.models import AuthToken

from opencompany.core.logins import client_address
from opencompany.core.models import LoginThrottle

pytestmark = pytest.mark.django_db

PASSWORD = "owner-pass-123"


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS = 3
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_USERNAME = 2
    settings.OPENCOMPANY_LOGIN_LOCKOUT_S = 60
    settings.OPENCOMPANY_LOGIN_LOCKOUT_MAX_S = 3600
    settings.OPENCOMPANY_LOGIN_WINDOW_S = 900
    cache.clear()  # DRF's request rate counts in the cache, which outlives a test


def _token(client, username, password, forwarded="203.0.113.1"):
    return client.post(
        "/api/v1/auth/token",
        {"username": username, "password": password},
        format="json",
        HTTP_X_FORWARDED_FOR=forwarded,
    )


def test_a_rotating_forwarded_for_header_is_throttled_on_the_real_address(owner, anon_client):
    for n in range(3):
        refused = _token(anon_client, f"guess{n}", "wrong", forwarded=f"198.51.100.{n}")
        assert refused.status_code == 401

    response = _token(anon_client, "owner", PASSWORD, forwarded="198.51.100.99")

    assert response.status_code == 429
    assert response.json() == {
        "code": "throttled",
        "message": "Too many requests; slow down.",
        "extra": {"retry_after_s": 60},
    }
    assert response["Retry-After"] == "61"
    assert AuthToken.objects.exists() is False


def test_the_token_endpoint_locks_a_username_whatever_the_address(owner, anon_client, settings):
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS = 100
    assert _token(anon_client, "owner", "wrong").status_code == 401
    assert _token(anon_client, "owner", "wrong").status_code == 401

    locked = _token(anon_client, "owner", PASSWORD)

    assert (locked.status_code, locked.json()["code"]) == (429, "throttled")
    assert AuthToken.objects.exists() is False
    assert all("owner" not in key for key in LoginThrottle.objects.values_list("key", flat=True))


def test_the_request_rate_of_the_token_endpoint_keys_on_the_real_address(anon_client, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "auth_token": "2/min",
        },
    }
    statuses = [
        anon_client.post(
            "/api/v1/auth/token", {"username": "x"}, format="json", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}"
        ).status_code
        for n in range(3)
    ]

    assert statuses == [400, 400, 429]


def test_the_login_form_is_throttled_and_the_right_password_does_not_sign_in(owner, client):
    for _ in range(2):
        assert client.post("/accounts/login/", {"username": "owner", "password": "wrong"}).status_code == 200

    response = client.post("/accounts/login/", {"username": "owner", "password": PASSWORD})

    assert response.status_code == 429
    assert response["Retry-After"] == "60"
    assert response.content == b"Too many sign-in attempts. Try again in 60 seconds.\n"
    assert SESSION_KEY not in client.session


def test_the_admin_login_is_throttled_per_address(staff, client):
    for n in range(3):
        client.post("/admin/login/", {"username": f"guess{n}", "password": "wrong"})

    response = client.post("/admin/login/?next=/admin/", {"username": "staff", "password": "staff-pass-123"})

    assert response.status_code == 429
    assert SESSION_KEY not in client.session
    assert client.get("/admin/").status_code == 302  # still signed out


def test_each_failure_after_a_lockout_doubles_it(owner, anon_client, settings):
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS = 100
    lockouts = []
    for _ in range(4):
        assert _token(anon_client, "owner", "wrong").status_code == 401
        row = LoginThrottle.objects.get(key__startswith="user:")
        if row.locked_until is not None:
            lockouts.append(round((row.locked_until - row.last_failed_at).total_seconds()))
            # The lockout runs out.
            LoginThrottle.objects.filter(pk=row.pk).update(locked_until=timezone.now() - timedelta(seconds=1))

    assert lockouts == [60, 120, 240]
    assert LoginThrottle.objects.get(key__startswith="user:").failures == 4


def test_the_lockout_stops_at_its_maximum(owner, anon_client, settings):
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS = 100
    settings.OPENCOMPANY_LOGIN_LOCKOUT_MAX_S = 100
    for _ in range(3):
        _token(anon_client, "owner", "wrong")
        LoginThrottle.objects.update(locked_until=None)

    row = LoginThrottle.objects.get(key__startswith="user:")
    assert row.failures == 3
    assert _token(anon_client, "owner", "wrong").status_code == 401
    row.refresh_from_db()
    assert round((row.locked_until - row.last_failed_at).total_seconds()) == 100


def test_a_quiet_window_starts_the_count_again(owner, anon_client):
    _token(anon_client, "owner", "wrong")
    LoginThrottle.objects.update(last_failed_at=timezone.now() - timedelta(seconds=901))

    assert _token(anon_client, "owner", "wrong").status_code == 401

    row = LoginThrottle.objects.get(key__startswith="user:")
    assert (row.failures, row.locked_until) == (1, None)


def test_the_right_password_clears_the_username_count_and_keeps_the_address_count(owner, anon_client):
    assert _token(anon_client, "owner", "wrong").status_code == 401

    assert _token(anon_client, "owner", PASSWORD).status_code == 200

    assert list(LoginThrottle.objects.values_list("key", "failures")) == [("addr:127.0.0.1", 1)]


def test_the_client_address_is_remote_addr_unless_proxies_are_trusted(settings):
    request = SimpleNamespace(
        META={"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 203.0.113.7, 10.0.0.4"}
    )

    settings.OPENCOMPANY_NUM_PROXIES = 0
    untrusted = client_address(request)
    settings.OPENCOMPANY_NUM_PROXIES = 2
    two = client_address(request)
    settings.OPENCOMPANY_NUM_PROXIES = 5
    more_than_sent = client_address(request)

    assert (untrusted, two, more_than_sent) == ("10.0.0.5", "203.0.113.7", "6.6.6.6")


def test_staff_lift_a_lockout_from_the_admin(owner, client, staff):
    for _ in range(3):
        client.post("/accounts/login/", {"username": "owner", "password": "wrong"})
    assert client.post("/accounts/login/", {"username": "owner", "password": PASSWORD}).status_code == 429
    locked = list(LoginThrottle.objects.values_list("pk", flat=True))
    admin_client = Client()
    admin_client.force_login(staff)

    response = admin_client.post(
        reverse("admin:core_loginthrottle_changelist"), {"action": "lift_lockout", "_selected_action": locked}
    )

    assert response.status_code == 302
    assert LoginThrottle.objects.exists() is False
    assert client.post("/accounts/login/", {"username": "owner", "password": PASSWORD}).status_code == 302
