"""The sign-in throttle shared by the API token endpoint, the login form and the admin login.

Failed sign-ins are counted per client address and per username. Past a limit, further attempts are
refused (429) without checking the password, for a lockout that doubles with every failure after it
(up to a maximum), so guessing slows down exponentially; a quiet window resets the count. The client
address is `REMOTE_ADDR` unless `OPENCOMPANY_NUM_PROXIES` says how many proxies in front of the app
append to `X-Forwarded-For`; a header the client sent itself is never believed.

Counters live in the database, so every server process shares them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Max
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils import timezone
from django.utils.crypto import salted_hmac

from opencompany.core.models import LoginThrottle


def client_address(request: Any) -> str:
    """The client's address: `REMOTE_ADDR`, or with `OPENCOMPANY_NUM_PROXIES = n`, the n-th entry
    from the right of `X-Forwarded-For` (the address the outermost trusted proxy saw). Same rule as
    DRF's throttles with `NUM_PROXIES`."""
    meta = request.META
    remote = str(meta.get("REMOTE_ADDR") or "")
    proxies = int(settings.OPENCOMPANY_NUM_PROXIES)
    forwarded = str(meta.get("HTTP_X_FORWARDED_FOR") or "")
    if proxies <= 0 or not forwarded:
        return remote
    addresses = [a.strip() for a in forwarded.split(",") if a.strip()]
    if not addresses:
        return remote
    return addresses[-min(proxies, len(addresses))]


def _username_key(username: str) -> str:
    digest = salted_hmac(
        "opencompany.core.logins.username", username.strip().casefold(), algorithm="sha256"
    ).hexdigest()
    return f"user:{digest[:40]}"


def _keys(request: Any, username: str | None) -> dict[str, int]:
    """The counters a sign-in touches, with their failure limits, in a fixed (sorted) order."""
    keys = {f"addr:{client_address(request)[:64]}": int(settings.OPENCOMPANY_LOGIN_FAILURES_PER_ADDRESS)}
    if username:
        keys[_username_key(username)] = int(settings.OPENCOMPANY_LOGIN_FAILURES_PER_USERNAME)
    return dict(sorted(keys.items()))


def login_retry_after(*, request: Any, username: str | None) -> int | None:
    """Whole seconds until a sign-in from this client for this username is accepted again, or None when
    it may proceed now."""
    now = timezone.now()
    until = LoginThrottle.objects.filter(
        key__in=list(_keys(request, username)), locked_until__gt=now
    ).aggregate(until=Max("locked_until"))["until"]
    if until is None:
        return None
    return max(1, math.ceil((until - now).total_seconds()))


def _lockout(failures: int, limit: int) -> timedelta | None:
    if failures < limit:
        return None
    base = int(settings.OPENCOMPANY_LOGIN_LOCKOUT_S)
    longest = int(settings.OPENCOMPANY_LOGIN_LOCKOUT_MAX_S)
    # Doubling stops well before the float range ends; the cap decides anyway.
    return timedelta(seconds=min(longest, base * 2 ** min(failures - limit, 30)))


def _count_failure(key: str, limit: int, now: datetime) -> None:
    LoginThrottle.objects.bulk_create(
        [LoginThrottle(key=key, failures=0, last_failed_at=now)], ignore_conflicts=True
    )
    row = LoginThrottle.objects.select_for_update().get(key=key)
    quiet = timedelta(seconds=int(settings.OPENCOMPANY_LOGIN_WINDOW_S))
    failures = 1 if row.last_failed_at <= now - quiet else row.failures + 1
    lockout = _lockout(failures, limit)
    LoginThrottle.objects.filter(pk=row.pk).update(
        failures=failures, last_failed_at=now, locked_until=now + lockout if lockout else None
    )


@transaction.atomic
def login_failed(*, request: Any, username: str | None) -> None:
    """Count a failed sign-in against the client's address and the username (rows locked in key order)."""
    now = timezone.now()
    for key, limit in _keys(request, username).items():
        _count_failure(key, limit, now)


def login_succeeded(*, request: Any, username: str | None) -> None:
    """A right password clears the username's count (never the address's: one account of one's own must
    not reset the count of guesses against others)."""
    if username:
        LoginThrottle.objects.filter(key=_username_key(username)).delete()


def login_lockouts_lift(*, keys: list[str]) -> int:
    """Staff lift the lockouts (and forget the failures) of these counters; returns how many."""
    deleted, _ = LoginThrottle.objects.filter(key__in=keys).delete()
    return deleted


def username_from(credentials: dict[str, Any]) -> str | None:
    value = credentials.get(get_user_model().USERNAME_FIELD, credentials.get("username"))
    return value if isinstance(value, str) else None


def on_user_login_failed(
    sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any
) -> None:
    """`user_login_failed` receiver: every failed `authenticate(request, ...)` counts."""
    if request is not None:
        login_failed(request=request, username=username_from(credentials))


def on_user_logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """`user_logged_in` receiver (the login form, the admin)."""
    if request is not None and user is not None:
        login_succeeded(request=request, username=user.get_username())


def login_throttled(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Wrap a sign-in form view: a POST from a locked-out address or for a locked-out username answers
    429 with `Retry-After` before the view (and the password check) runs."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST":
            username = request.POST.get(get_user_model().USERNAME_FIELD)
            retry_after = login_retry_after(request=request, username=username)
            if retry_after is not None:
                response = HttpResponse(
                    f"Too many sign-in attempts. Try again in {retry_after} seconds.\n",
                    status=429,
                    content_type="text/plain",
                )
                response["Retry-After"] = str(retry_after)
                return response
        return view(request, *args, **kwargs)

    return wrapped
