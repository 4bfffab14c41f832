"""Sign-in attempts racing each other (real threads, PostgreSQL): each is counted before its password is
hashed, so a burst gets exactly the attempts the limit leaves and the rest are refused unhashed; and a
process hashes a bounded number of passwords at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.contrib.auth.hashers import MD5PasswordHasher
from django.db import connection
from django.test import Client

from opencompany.core.models import LoginThrottle

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

COUNTING = "tests.core.test_login_races.CountingHasher"


class CountingHasher(MD5PasswordHasher):
    """The test suite's hasher, counting the passwords it hashes and how many hash at once."""

    calls = 0
    running = 0
    most_at_once = 0
    hold_s = 0.0
    lock = threading.Lock()
    inside = threading.local()  # MD5's verify encodes: one hash, counted once

    @classmethod
    def reset(cls, hold_s: float = 0.0) -> None:
        cls.calls = cls.running = cls.most_at_once = 0
        cls.hold_s = hold_s

    def _hashing(self) -> None:
        cls = type(self)
        if getattr(cls.inside, "hashing", False):
            return
        with cls.lock:
            cls.calls += 1
            cls.running += 1
            cls.most_at_once = max(cls.most_at_once, cls.running)
        time.sleep(cls.hold_s)
        with cls.lock:
            cls.running -= 1

    def encode(self, password: str, salt: str) -> str:
        self._hashing()
        return super().encode(password, salt)

    def verify(self, password: str, encoded: str) -> bool:
        self._hashing()
        type(self).inside.hashing = True
        try:
            return super().verify(password, encoded)
        finally:
            type(self).inside.hashing = False


@pytest.fixture
def counting(settings: Any) -> type[CountingHasher]:
    settings.PASSWORD_HASHERS = [COUNTING]
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "auth_token": "1000/min",
        },
    }
    CountingHasher.reset()
    return CountingHasher


def _in_parallel(count: int, request: Any) -> Counter[int]:
    start = threading.Barrier(count)

    def one(n: int) -> int:
        start.wait()
        try:
            return int(request(n).status_code)
        finally:
            connection.close()

    with ThreadPoolExecutor(count) as pool:
        return Counter(pool.map(one, range(count)))


def test_40_parallel_wrong_passwords_against_a_limit_of_5_count_5_and_hash_only_those(
    owner, counting, settings
):
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_USERNAME = 5
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS = 1000
    settings.OPENCOMPANY_LOGIN_HASH_WAIT_S = 30
    counting.reset()

    statuses = _in_parallel(
        40,
        lambda n: Client().post(
            "/api/v1/auth/token",
            {"username": "owner", "password": f"guess-{n}"},
            content_type="application/json",
        ),
    )

    assert statuses == Counter({401: 5, 429: 35})
    assert counting.calls == 5  # the refused 35 were never hashed
    row = LoginThrottle.objects.get(key__startswith="user:")
    assert row.failures == 5
    assert row.locked_until is not None
    assert LoginThrottle.objects.get(key="addr:127.0.0.1").failures == 5


def test_the_login_form_counts_a_parallel_burst_per_address_exactly(owner, counting, settings):
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS = 20
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_USERNAME = 1000
    settings.OPENCOMPANY_LOGIN_HASH_WAIT_S = 30
    counting.reset()

    statuses = _in_parallel(
        30,
        lambda n: Client().post("/accounts/login/", {"username": f"guess{n}", "password": "wrong-pass"}),
    )

    assert statuses == Counter({200: 20, 429: 10})  # the form shown again, or the lockout page
    assert counting.calls == 20
    assert LoginThrottle.objects.get(key="addr:127.0.0.1").failures == 20


def test_a_burst_of_sign_ins_hashes_one_password_at_a_time_per_process(owner, counting, settings):
    settings.OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS = 1000
    settings.OPENCOMPANY_LOGIN_HASH_CONCURRENCY = 1
    settings.OPENCOMPANY_LOGIN_HASH_WAIT_S = 30
    counting.reset(hold_s=0.05)

    statuses = _in_parallel(
        8,
        lambda n: Client().post(
            "/api/v1/auth/token",
            {"username": f"user{n}", "password": "wrong"},
            content_type="application/json",
        ),
    )

    assert statuses == Counter({401: 8})
    assert (counting.calls, counting.most_at_once) == (8, 1)


def test_a_sign_in_that_waits_too_long_for_a_password_check_is_503_and_not_counted(owner, counting, settings):
    from opencompany.core import logins

    settings.OPENCOMPANY_LOGIN_HASH_CONCURRENCY = 1
    settings.OPENCOMPANY_LOGIN_HASH_WAIT_S = 0.1
    with logins.password_check_slot():  # another sign-in of this process is being checked
        response = _in_another_thread(
            lambda: Client().post(
                "/api/v1/auth/token",
                {"username": "owner", "password": "owner-pass-123"},
                content_type="application/json",
            )
        )

    assert (response.status_code, response["Retry-After"]) == (503, "1")
    assert response.json()["code"] == "service_unavailable"
    assert counting.calls == 0
    assert list(LoginThrottle.objects.values_list("failures", flat=True)) == [0, 0]


def _in_another_thread(fn: Any) -> Any:
    with ThreadPoolExecutor(1) as pool:
        try:
            return pool.submit(fn).result()
        finally:
            pool.submit(lambda: connection.close()).result()
