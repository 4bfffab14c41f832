"""The sign-in throttle shared by the API token endpoint, the login form and the admin login.

Sign-in attempts are counted per client address and per username. An attempt is counted before its
password is checked, under the counters' row locks (`login_attempt_admit`), so parallel guesses cannot
all pass a check made before any of them is recorded: past a limit, further attempts are refused (429)
without the password being hashed, for a lockout that doubles with every attempt after it (up to a
maximum), so guessing slows down exponentially; a quiet window resets the count. A right password takes
its attempt back from the address and clears the username. The client address is `REMOTE_ADDR` unless
`OPENCOMPANY_NUM_PROXIES` says how many proxies in front of the app append to `X-Forwarded-For`; a
header the client sent itself is never believed.

Password hashing costs a core for a while by design: `password_check_slot` lets at most
`OPENCOMPANY_LOGIN_HASH_CONCURRENCY` sign-ins of a process hash at once, so a burst of them cannot
starve the process's other requests.

Counters live in the database, so every server process shares them.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils import timezone
from django.utils.crypto import salted_hmac

from opencompany.core.errors import SERVICE_UNAVAILABLE, ApplicationError
from opencompany.core.models import LoginThrottle

# Marks a request whose sign-in attempt `login_attempt_admit` counted (the failure signal then adds
# nothing).
_COUNTED = "_opencompany_login_counted"


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


def _lockout(failures: int, limit: int) -> timedelta | None:
    if failures < limit:
        return None
    base = int(settings.OPENCOMPANY_LOGIN_LOCKOUT_S)
    longest = int(settings.OPENCOMPANY_LOGIN_LOCKOUT_MAX_S)
    # Doubling stops well before the float range ends; the cap decides anyway.
    return timedelta(seconds=min(longest, base * 2 ** min(failures - limit, 30)))


def _counted(row: LoginThrottle, limit: int, now: datetime) -> dict[str, Any]:
    """The counter's columns once one more attempt is counted (a quiet window starts it again)."""
    quiet = timedelta(seconds=int(settings.OPENCOMPANY_LOGIN_WINDOW_S))
    failures = 1 if row.last_failed_at <= now - quiet else row.failures + 1
    lockout = _lockout(failures, limit)
    return {"failures": failures, "last_failed_at": now, "locked_until": now + lockout if lockout else None}


def _locked_rows(keys: list[str], now: datetime) -> list[LoginThrottle]:
    """The counters of `keys`, created when missing, locked in key order until the transaction ends."""
    LoginThrottle.objects.bulk_create(
        [LoginThrottle(key=key, failures=0, last_failed_at=now) for key in keys], ignore_conflicts=True
    )
    return list(LoginThrottle.objects.select_for_update().filter(key__in=keys).order_by("key"))


@transaction.atomic
def login_attempt_admit(*, request: Any, username: str | None) -> int | None:
    """Count one sign-in attempt against the client's address and the username, before its password is
    checked: None when the attempt is admitted (and counted), else the whole seconds until one is
    accepted again (nothing counted; the password must not be checked).

    The counters are locked in key order for the decision and the count, so of any number of parallel
    attempts exactly as many are admitted as the limits leave, and the rest are refused."""
    now = timezone.now()
    limits = _keys(request, username)
    rows = _locked_rows(list(limits), now)
    until = max((r.locked_until for r in rows if r.locked_until and r.locked_until > now), default=None)
    if until is not None:
        return max(1, math.ceil((until - now).total_seconds()))
    for row in rows:
        LoginThrottle.objects.filter(pk=row.pk).update(**_counted(row, limits[row.key], now))
    setattr(getattr(request, "_request", request), _COUNTED, True)
    return None


@transaction.atomic
def login_failed(*, request: Any, username: str | None) -> None:
    """Count a failed sign-in whose attempt `login_attempt_admit` did not count (rows locked in key
    order)."""
    if getattr(getattr(request, "_request", request), _COUNTED, False):
        return
    now = timezone.now()
    limits = _keys(request, username)
    for row in _locked_rows(list(limits), now):
        LoginThrottle.objects.filter(pk=row.pk).update(**_counted(row, limits[row.key], now))


@transaction.atomic
def login_attempt_withdraw(*, request: Any, username: str | None) -> None:
    """Take back an attempt `login_attempt_admit` counted whose password was never checked: each counter
    one attempt less (its lockout recomputed from there)."""
    limits = _keys(request, username)
    for row in LoginThrottle.objects.select_for_update().filter(key__in=list(limits)).order_by("key"):
        _uncount(row, limits[row.key])


def _uncount(row: LoginThrottle, limit: int) -> None:
    failures = max(0, row.failures - 1)
    lockout = _lockout(failures, limit)
    LoginThrottle.objects.filter(pk=row.pk).update(
        failures=failures, locked_until=row.last_failed_at + lockout if lockout else None
    )


@transaction.atomic
def login_succeeded(*, request: Any, username: str | None) -> None:
    """A right password clears the username's count and takes its attempt back from the address's (the
    address keeps its other attempts: one account of one's own must not reset the count of guesses
    against others)."""
    limits = _keys(request, None)
    if getattr(getattr(request, "_request", request), _COUNTED, False):
        for row in LoginThrottle.objects.select_for_update().filter(key__in=list(limits)):
            _uncount(row, limits[row.key])
    if username:
        LoginThrottle.objects.filter(key=_username_key(username)).delete()


def login_lockouts_lift(*, keys: list[str]) -> int:
    """Staff lift the lockouts (and forget the failures) of these counters; returns how many."""
    deleted, _ = LoginThrottle.objects.filter(key__in=keys).delete()
    return deleted


_slots: threading.BoundedSemaphore | None = None
_slots_size = 0
_slots_lock = threading.Lock()


def _hashing_slots() -> threading.BoundedSemaphore:
    global _slots, _slots_size
    size = max(1, int(settings.OPENCOMPANY_LOGIN_HASH_CONCURRENCY))
    with _slots_lock:
        if _slots is None or _slots_size != size:
            _slots, _slots_size = threading.BoundedSemaphore(size), size
        return _slots


def busy_error() -> ApplicationError:
    wait = max(1, math.ceil(float(settings.OPENCOMPANY_LOGIN_HASH_WAIT_S)))
    return ApplicationError(
        SERVICE_UNAVAILABLE,
        "Too many sign-ins are being checked right now; try again shortly.",
        {"retry_after_s": wait},
        status=503,
    )


@contextmanager
def password_check_slot() -> Iterator[None]:
    """Hold one of the process's `OPENCOMPANY_LOGIN_HASH_CONCURRENCY` password-check slots for the block
    (waiting up to `OPENCOMPANY_LOGIN_HASH_WAIT_S`; past that, `service_unavailable`). The request's
    database connection goes back to the pool before it waits: a queue of sign-ins holds no
    connections."""
    if not connection.in_atomic_block:
        connection.close()
    slots = _hashing_slots()
    if not slots.acquire(timeout=float(settings.OPENCOMPANY_LOGIN_HASH_WAIT_S)):
        raise busy_error()
    try:
        yield
    finally:
        slots.release()


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


def _plain(status: int, text: str, retry_after: int) -> HttpResponse:
    response = HttpResponse(text, status=status, content_type="text/plain")
    response["Retry-After"] = str(retry_after)
    return response


def login_throttled(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Wrap a sign-in form view: a POST with a username and a password is counted first
    (`login_attempt_admit`); a locked-out address or username answers 429 with `Retry-After` before
    the view (and the password check) runs, and the view runs in a password-check slot."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        username = request.POST.get(get_user_model().USERNAME_FIELD) if request.method == "POST" else None
        if not username or not request.POST.get("password"):
            return view(request, *args, **kwargs)  # no password to check: the form answers
        retry_after = login_attempt_admit(request=request, username=username)
        if retry_after is not None:
            return _plain(
                429, f"Too many sign-in attempts. Try again in {retry_after} seconds.\n", retry_after
            )
        try:
            with password_check_slot():
                return view(request, *args, **kwargs)
        except ApplicationError as exc:
            if exc.code != SERVICE_UNAVAILABLE:
                raise
            login_attempt_withdraw(request=request, username=username)
            return _plain(503, f"{exc.message}\n", int(exc.extra["retry_after_s"]))

    return wrapped
