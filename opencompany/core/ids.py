"""Opaque ids minted by us: a short type prefix and 20 url-safe random characters."""

import secrets
import string

_ALPHABET = string.ascii_lowercase + string.digits


def mint_id(prefix: str, length: int = 20) -> str:
    """Return e.g. `wf_3k9x…`: unguessable, url-safe, sortable only by chance (never by time)."""
    body = "".join(secrets.choice(_ALPHABET) for _ in range(length))
    return f"{prefix}_{body}"
