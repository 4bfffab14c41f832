"""API tokens and their revocation.

Tokens are django-rest-knox tokens: stored as digests, each with an expiry, revocable one by one.
Logging out revokes the owner's tokens and closes the websockets of the session that logged out; a
password change revokes every token and closes every websocket of the owner. Sockets hear this through
the owner's channel-layer group (`auth.revoked`), whichever process serves them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.crypto import salted_hmac
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication
from knox.models import AuthToken

from opencompany.core.events import owner_group, publish_on_commit

AUTH_REVOKED_EVENT = "auth.revoked"


class ExpiringTokenAuthentication(TokenAuthentication):
    """knox's token authentication; an expired token is deleted and refused.

    knox also sweeps the owner's other expired tokens on every request (one more query each); the
    sweep runs when a token is issued instead (`token_issue`).
    """

    def _cleanup_token(self, auth_token: AuthToken) -> bool:
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False


class ExpiringTokenScheme(KnoxTokenScheme):
    """The OpenAPI security scheme of `ExpiringTokenAuthentication`: `Authorization: Token <token>`."""

    target_class = "opencompany.core.tokens.ExpiringTokenAuthentication"


def token_issue(*, user: Any) -> tuple[str, datetime]:
    """A new token for `user` and its expiry (`OPENCOMPANY_TOKEN_TTL_S` from now). The user's expired
    tokens are deleted on the way. The token string is returned once and stored only as a digest."""
    AuthToken.objects.filter(user=user, expiry__lt=timezone.now()).delete()
    instance, token = AuthToken.objects.create(
        user=user, expiry=timedelta(seconds=int(settings.OPENCOMPANY_TOKEN_TTL_S))
    )
    assert instance.expiry is not None  # noqa: S101 - always given a TTL above
    return token, instance.expiry


def token_revoke(*, token: AuthToken) -> int:
    """Revoke one token; returns how many were deleted (0 when it was already gone)."""
    deleted, _ = AuthToken.objects.filter(pk=token.pk).delete()
    return deleted


def tokens_active_count(*, user_id: int) -> int:
    """How many unexpired API tokens the user holds."""
    return AuthToken.objects.filter(user_id=user_id, expiry__gt=timezone.now()).count()


def session_digest(session_key: str | None) -> str | None:
    """What names a session in events: a keyed digest, never the session key itself."""
    if not session_key:
        return None
    return salted_hmac("opencompany.core.tokens.session", session_key, algorithm="sha256").hexdigest()[:32]


def credentials_revoke(*, user: Any, session_key: str | None = None) -> int:
    """Revoke every token of `user` and close their websockets after commit: only the sockets of
    `session_key` when given (a logout), all of them otherwise (a password change). Returns the number
    of tokens revoked."""
    if getattr(user, "pk", None) is None:
        return 0
    deleted, _ = AuthToken.objects.filter(user_id=user.pk).delete()
    publish_on_commit(owner_group(user.pk), AUTH_REVOKED_EVENT, {"session": session_digest(session_key)})
    return deleted


def on_user_logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """`user_logged_out` receiver: the session is about to be flushed; its key is still readable."""
    if user is None:
        return
    session = getattr(request, "session", None)
    credentials_revoke(user=user, session_key=getattr(session, "session_key", None))


class RevokeCredentialsOnPasswordChange:
    """A password "validator" whose `password_changed` hook (called by Django whenever a user's new
    password is saved: the password change form, the admin, `changepassword`, `set_password`)
    revokes the owner's tokens and closes their websockets. It never refuses a password."""

    def validate(self, password: str, user: Any = None) -> None:
        return None

    def password_changed(self, password: str, user: Any = None) -> None:
        # Also called right after a user is created: there is nothing to revoke then, and no socket.
        if user is not None:
            credentials_revoke(user=user)

    def get_help_text(self) -> str:
        return ""
